import GRDB
import VigilKit
print("stub")
