"""VigilTOML against Python's tomllib, document by document.

    VIGIL_TOML_CHECK=.build/debug/vigil-toml-check /usr/bin/python3 -m unittest Tests/python/test_toml_differential.py -v

Feeds hand-written edge cases (in the style of toml-test), generated documents
and mutations of them to both parsers (vigil-toml-check --batch for VigilTOML)
and checks that they agree on accept or reject and, when both accept, on every
value. Where the two are allowed to differ it is said below: VigilTOML refuses
integers outside 64 bits (the TOML spec says to) and nesting deeper than 128
levels, which tomllib accepts. Random choices are seeded, so a run is
repeatable; VIGIL_TOML_SEED picks another seed, VIGIL_TOML_COUNT more documents.
"""

import datetime
import json
import math
import os
import random
import re
import struct
import subprocess
import tomllib
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHECK = os.environ.get("VIGIL_TOML_CHECK") or os.path.join(REPO, ".build", "debug", "vigil-toml-check")
SEED = int(os.environ.get("VIGIL_TOML_SEED", "20261123"))
COUNT = int(os.environ.get("VIGIL_TOML_COUNT", "3000"))
MAX_DEPTH = 128

# Documents both must accept (values compared) or refuse. Bytes, so invalid UTF-8 fits.
VALID = [
    b"", b"\n\n", b"# only a comment", b"a = 1", b"a = 1\r\n", b"a = 1 # c\nb = 2",
    b"bare_key-1 = 1\n'literal key' = 2\n\"basic \\u00e9 key\" = 3\n\"\" = 4\n'x' = 5",
    b"a.b.c = 1\na.b.d = 2\na . e = 3", b"1.2 = 3", b"3 = 'x'", b"true = 1\nfalse = 2\ninf = 3\nnan = 4",
    b"a = \"tab\\there \\\" \\\\ \\b\\f\\n\\r \\u0041 \\U0001F600\"",
    b"a = 'C:\\Users\\x'", b"a = '''\nline 1\nline 2'''", b"a = '''''quoted'''''", b"a = \"\"\"\"\"\"\"\"",
    b"a = \"\"\"\nThe quick \\\n\n   brown \\  \n  fox\"\"\"", b"a = \"\"\"x\\\n\"\"\"", b"a = \"\"\"a\r\nb\"\"\"",
    b"a = \"\"\"two \"\" quotes\"\"\"", b"a = \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"", b"a = '\xe4\xb8\xad'",
    b"i = [0, +1, -1, 1_000, 9223372036854775807, -9223372036854775808, 0xDEAD_beef, 0o755, 0b1101, 0x0, -0, +0]",
    b"f = [1.0, -0.5, +3.14, 1e10, 1E-10, 6.626e-34, 1_000.000_1, 1e1_0, 0.0, -0.0, 0e0, 1e+300, 1e400, -1e400]",
    b"f = [inf, +inf, -inf, nan, +nan, -nan]", b"b = [true, false]",
    b"d = [1979-05-27T07:32:00Z, 1979-05-27T00:32:00-07:00, 1979-05-27T00:32:00.999999+07:00, "
    b"1979-05-27T07:32:00, 1979-05-27 07:32:00.5, 1979-05-27t07:32:00z, 1979-05-27, 07:32:00, 00:32:00.999999999]",
    b"d = 2000-02-29\ne = 1900-02-28\nf = 0001-01-01T00:00:00Z", b"d = 1979-05-27 # date then comment",
    b"a = []\nb = [ ]\nc = [1,]\nd = [\n  1, # one\n  2\n  , 3,\n]\ne = [[1, 2], ['a', \"b\"], [[]], {}]",
    b"mixed = [1, 'a', 2.5, true, 1979-05-27, [1], {x = 1}]",
    b"t = {}\nu = { a = 1, b.c = 2, b.d = 'x' }\nv = {a={b={c=1}}}",
    b"[a]\nx = 1\n[b]\n[a.c]\ny = 2", b"[ a . b . c ]\n[a]\nz = 1", b"[\"quoted\".'lit'.bare]\nk = 1",
    b"[[p]]\nn = 1\n[[p]]\nn = 2\n[p.q]\nm = 3\n[[p.r]]\n[[p.r]]", b"[[a.b]]\nx = 1\n[a]\ny = 2",
    b"[fruit]\napple.color = 'red'\napple.taste.sweet = true\n[fruit.apple.texture]\nsmooth = true",
    b"[x.y.z]\n[x]\ny.w = 1", b"a.b = 1\n[a.c]", b"[[a]]\nb.c = 1\n[[a]]\nb.c = 2", b"[a.b.c]\n[a.b]\n[a]",
    b"a = 1\t\t# tabs\t\n\t[t]\t\n\tb = 2", b"# comment with \xc3\xa9 and \t tab\na = 1",
    b"k = \"\\u0000 nul escape\"", b"k = \"\xf4\x8f\xbf\xbf\"", b"k = \"\\U0010FFFF\"",
]
INVALID = [
    b"[[[", b"[[[]]]", b"[}", b"a =[}", b"a = [}", b"a = {]", b"[[]]", b"[]", b"[a", b"[a]]", b"[[a]", b"[[a] ]", b"[ [a]]", b"a", b"a =", b"= 1",
    b"a = 1 b = 2", b"a = 1\na = 2", b"a = 1\na.b = 2", b"a.b = 1\na = 2", b"[a]\n[a]", b"[a]\nb = 1\n[a.b]",
    b"[a.b]\n[a]\nb = 1", b"a = {}\n[a]", b"a = {b = 1}\n[a.c]", b"a = {b = 1}\na.c = 2", b"a = []\n[[a]]",
    b"[[a]]\n[a]", b"[a]\n[[a]]", b"[fruit]\napple.color = 'red'\n[fruit.apple]",
    b"[fruit]\napple.taste.sweet = true\n[fruit.apple.taste]", b"[a.b.c]\nz = 9\n[a]\nb.c.t = 1",
    b"[a]\nb.c = 1\n[a.b]", b"a.b = 1\n[a]", b"[[a]]\n[a.b]\nx = 1\n[a]\nb.x = 2",
    b"a = \"unterminated", b"a = 'unterminated", b"a = \"\"\"unterminated", b"a = '''unterminated",
    b"a = \"line\nbreak\"", b"a = 'line\nbreak'", b"a = \"\\x41\"", b"a = \"\\e\"", b"a = \"\\ \"", b"a = \"\\u12\"",
    b"a = \"\\uD800\"", b"a = \"\\uDFFF\"", b"a = \"\\U00110000\"", b"a = \"\\UFFFFFFFF\"", b"a = \"\\U0000D800\"",
    b"a = \"\"\"\\  x\n\"\"\"", b"a = \"\"\"\"\"\"\"\"\"", b"a = '''''''''", b"a = \"a\x00b\"", b"a = 'a\x7fb'",
    b"a = \"\"\"a\x01b\"\"\"", b"# comment \x00 nul", b"# comment \x7f del", b"a = 1 # \x01", b"a = 1\rb = 2",
    b"a = \"\r\"", b"\xef\xbb\xbfa = 1", b"a = \"\xff\"", b"a = \"\xc0\xaf\"", b"a = \"\xed\xa0\x80\"",
    b"a = \"\xf4\x90\x80\x80\"", b"a = \"\xe2\x82\"", b"\xff", b"a = 1\n\xfe = 2", b"\xc3\xa9 = 1",
    b"a = 01", b"a = 00", b"a = -01", b"a = 1__0", b"a = _1", b"a = 1_", b"a = 0x", b"a = 0x_1", b"a = 0X1",
    b"a = +0x1", b"a = -0o7", b"a = 0o8", b"a = 0b2", b"a = 0b", b"a = 1.", b"a = .1", b"a = 1.e5", b"a = 1e",
    b"a = 1e_5", b"a = 1.0_", b"a = 1._0", b"a = 01.5", b"a = infinity", b"a = Inf", b"a = NaN", b"a = +",
    b"a = -", b"a = 1x", b"a = truee", b"a = True", b"a = tru", b"a = 9223372036854775808",
    b"a = -9223372036854775809", b"a = 0x8000000000000000", b"a = 99999999999999999999999999999",
    b"a = 1979-02-30", b"a = 1979-13-01", b"a = 1979-00-01", b"a = 1979-01-32", b"a = 1900-02-29",
    b"a = 0000-01-01", b"a = 1979-05-27T24:00:00", b"a = 1979-05-27T07:60:00", b"a = 1979-05-27T07:32:60",
    b"a = 1979-05-27T07:32", b"a = 07:32", b"a = 07:32:00Z", b"a = 1979-05-27T07:32:00+24:00",
    b"a = 1979-05-27T07:32:00+07", b"a = 1979-05-27T07:32:00.", b"a = 1979-05-27 07:32", b"a = 1979-5-27",
    b"a = 79-05-27", b"a = 1979-05-27T", b"a = 1979-05-27X07:32:00",
    b"a = [1 2]", b"a = [1,,2]", b"a = [,]", b"a = [", b"a = [1", b"a = ]", b"a = {", b"a = {a = 1",
    b"a = {a = 1,}", b"a = {a = 1\n}", b"a = {\na = 1}", b"a = {a = 1, a = 2}", b"a = {a.b = 1, a = 2}",
    b"a = {a = {}, a.b = 1}", b"a = {a = 1 b = 2}", b"a = {,}", b"a = {a}",
    b"a.b.c = 1\na.b = 2", b"a.'b = 1", b"a.\"b = 1", b"a. = 1", b".a = 1", b"a..b = 1", b"a b = 1",
    b"\"\"\"key\"\"\" = 1", b"'''key''' = 1", b"a = 1 = 2", b"[a.]", b"[.a]", b"[a..b]", b"[[a.]]",
    b"\x00", b"a = \x00", b"[a]\x00", b"a = 1\x00", b"\"\" = 1\n'' = 2",
]


def depth_of(value, level=0):
    """Levels of tables and arrays, each key and each array counted once."""
    if isinstance(value, dict):
        return max((depth_of(item, level + 1) for item in value.values()), default=level)
    if isinstance(value, list):
        return max((depth_of(item, level + 1) for item in value), default=level + 1)
    return level


def has_wide_int(value):
    if isinstance(value, dict):
        return any(has_wide_int(item) for item in value.values())
    if isinstance(value, list):
        return any(has_wide_int(item) for item in value)
    return isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63


DATETIME = re.compile(r"^(?:(\d{4})-(\d\d)-(\d\d))?T?(?:(\d\d):(\d\d):(\d\d)(?:\.(\d+))?)?(Z|[+-]\d\d:\d\d)?$")


def python_datetime(tagged):
    """VigilTOML's tagged date-time as the object tomllib gives (fraction cut to microseconds)."""
    match = DATETIME.match(tagged["value"])
    assert match, tagged
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    micro = int((fraction or "0")[:6].ljust(6, "0"))
    if tagged["type"] == "date-local":
        return datetime.date(int(year), int(month), int(day))
    if tagged["type"] == "time-local":
        return datetime.time(int(hour), int(minute), int(second), micro)
    tz = None
    if offset:
        minutes = 0 if offset == "Z" else (int(offset[1:3]) * 60 + int(offset[4:6])) * (-1 if offset[0] == "-" else 1)
        tz = datetime.timezone(datetime.timedelta(minutes=minutes))
    return datetime.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micro, tz)


def is_tagged(ours):
    return isinstance(ours, dict) and set(ours) == {"type", "value"} and isinstance(ours["type"], str)


def difference(ours, theirs, path="$"):
    """Where VigilTOML's tagged JSON and tomllib's value differ, or None."""
    if isinstance(theirs, dict):
        if not isinstance(ours, dict) or is_tagged(ours):
            return f"{path}: table expected, got {ours!r}"
        if set(ours) != set(theirs):
            return f"{path}: keys {sorted(ours)} != {sorted(theirs)}"
        for key in theirs:
            found = difference(ours[key], theirs[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(theirs, list):
        if not isinstance(ours, list) or len(ours) != len(theirs):
            return f"{path}: array of {len(theirs)} expected, got {ours!r}"
        for index, (a, b) in enumerate(zip(ours, theirs)):
            found = difference(a, b, f"{path}[{index}]")
            if found:
                return found
        return None
    if not is_tagged(ours):
        return f"{path}: scalar {theirs!r} expected, got {ours!r}"
    kind, text = ours["type"], ours["value"]
    if isinstance(theirs, bool):
        same = kind == "bool" and text == ("true" if theirs else "false")
    elif isinstance(theirs, int):
        same = kind == "integer" and int(text) == theirs
    elif isinstance(theirs, float):
        value = float(text)
        same = kind == "float" and (math.isnan(value) and math.isnan(theirs)
                                    or value == theirs and math.copysign(1, value) == math.copysign(1, theirs))
    elif isinstance(theirs, str):
        same = kind == "string" and text == theirs
    elif isinstance(theirs, (datetime.datetime, datetime.date, datetime.time)):
        mine = python_datetime(ours) if kind in ("datetime", "datetime-local", "date-local", "time-local") else None
        aware = getattr(theirs, "tzinfo", None) is not None
        same = (type(mine) is type(theirs) and mine == theirs and (getattr(mine, "tzinfo", None) is not None) == aware
                and (not aware or mine.utcoffset() == theirs.utcoffset()))
    else:
        same = False
    return None if same else f"{path}: {theirs!r} expected, got {ours!r}"


def run_batch(documents):
    payload = b"".join(struct.pack("<I", len(doc)) + doc for doc in documents)
    result = subprocess.run([CHECK, "--batch"], input=payload, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            timeout=600)
    if result.returncode != 0:
        raise AssertionError(f"vigil-toml-check died with {result.returncode}: {result.stderr.decode(errors='replace')[-2000:]}")
    # One JSON line per document (not splitlines(): strings may hold U+2028 and the like).
    lines = result.stdout.decode().split("\n")[:-1]
    if len(lines) != len(documents):
        raise AssertionError(f"vigil-toml-check answered {len(lines)} lines for {len(documents)} documents")
    return [json.loads(line) for line in lines]


def oracle(document):
    """('ok', value) or ('error', why) from tomllib."""
    try:
        return "ok", tomllib.loads(document.decode("utf-8"))
    except UnicodeDecodeError as error:
        return "error", f"invalid UTF-8: {error}"
    except tomllib.TOMLDecodeError as error:
        return "error", str(error)
    except RecursionError:
        return "error", "recursion"


def disagreement(document, ours):
    """Why the two disagree on `document`, or None."""
    verdict, theirs = oracle(document)
    we_accept = "error" not in ours
    if verdict == "error":
        return None if not we_accept else f"tomllib refuses ({theirs}) but VigilTOML accepts"
    if not we_accept:
        message = ours["error"]
        if has_wide_int(theirs) and "64 bits" in message:
            return None
        if depth_of(theirs) > MAX_DEPTH // 2 and "nested deeper" in message:
            return None
        return f"tomllib accepts but VigilTOML refuses: {message} (line {ours['line']}, column {ours['column']})"
    if has_wide_int(theirs):
        return "VigilTOML accepts an integer outside 64 bits"
    return difference(ours, theirs)


# -- generated documents

BARE = "abcxyzABZ019_-"
UNICODE = ["é", "€", "中", "😀", "\u200b", "ÿ"]


class Generator:
    def __init__(self, rng):
        self.rng = rng

    def key_part(self):
        r = self.rng.random()
        if r < 0.6:
            return "".join(self.rng.choice(BARE) for _ in range(self.rng.randint(1, 6)))
        if r < 0.8:
            return '"' + self.basic_content(4) + '"'
        return "'" + self.rng.choice(["", "a b", "x.y", "é", "q\"q", "#"]) + "'"

    def key(self, max_parts=3):
        return (" . " if self.rng.random() < 0.1 else ".").join(
            self.key_part() for _ in range(self.rng.randint(1, max_parts)))

    def basic_content(self, length):
        pieces = ["a", " ", "Z", "\\t", "\\n", "\\\"", "\\\\", "\\u00e9", "\\U0001F600", "\\b", "\\f", "\\r", "'",
                  "#", "="] + UNICODE
        return "".join(self.rng.choice(pieces) for _ in range(self.rng.randint(0, length)))

    def string(self):
        r = self.rng.random()
        if r < 0.4:
            return '"' + self.basic_content(8) + '"'
        if r < 0.6:
            return "'" + self.rng.choice(["", "C:\\x", "a\"b", "tab\there", "é€"]) + "'"
        if r < 0.8:
            body = self.basic_content(6) + self.rng.choice(["\n", "\\\n   ", "\"\"", "\r\n", ""]) + self.basic_content(4)
            return '"""' + self.rng.choice(["", "\n"]) + body + '"""'
        return "'''" + self.rng.choice(["", "\n"]) + self.rng.choice(["a\nb", "''x", "\\n raw", "é"]) + "'''"

    def integer(self):
        forms = [lambda: str(self.rng.randint(-10**6, 10**6)), lambda: "1_000_000", lambda: "+42", lambda: "-0",
                 lambda: hex(self.rng.randint(0, 2**40)).replace("0x", self.rng.choice(["0x", "0x"])),
                 lambda: "0o" + format(self.rng.randint(0, 4096), "o"), lambda: "0b" + format(self.rng.randint(0, 255), "b"),
                 lambda: str(self.rng.choice([2**63 - 1, -2**63, 2**63, -2**63 - 1, 10**19])),
                 lambda: "0xDEAD_BEEF"]
        return self.rng.choice(forms)()

    def float(self):
        forms = ["1.5", "-0.0", "+3.25", "1e3", "2E-2", "6.02e+23", "1_0.0_1", "inf", "-inf", "+nan", "nan",
                 "0.1", "1e308", "1e309", "5e-324", "3.141_592"]
        return self.rng.choice(forms)

    def datetime(self):
        return self.rng.choice(["1979-05-27T07:32:00Z", "1979-05-27T00:32:00.999999-07:00", "1979-05-27 07:32:00",
                                "1979-05-27", "07:32:00", "07:32:00.123", "2024-02-29T23:59:59.123456789+14:00"])

    def value(self, depth=0):
        r = self.rng.random()
        if depth < 4 and r < 0.12:
            items = [self.value(depth + 1) for _ in range(self.rng.randint(0, 3))]
            sep = self.rng.choice([", ", ",", ",\n  ", " , # c\n"])
            return "[" + self.rng.choice(["", "\n"]) + sep.join(items) + self.rng.choice(["", ",", "\n"]) + "]"
        if depth < 4 and r < 0.2:
            keys = list(dict.fromkeys(self.key(2) for _ in range(self.rng.randint(0, 3))))
            return "{" + ", ".join(f"{k} = {self.value(depth + 1)}" for k in keys) + "}"
        if r < 0.4:
            return self.string()
        if r < 0.55:
            return self.integer()
        if r < 0.7:
            return self.float()
        if r < 0.8:
            return self.rng.choice(["true", "false"])
        return self.datetime()

    def document(self):
        lines = []
        for _ in range(self.rng.randint(1, 12)):
            r = self.rng.random()
            if r < 0.12:
                lines.append(f"[{self.key()}]")
            elif r < 0.2:
                lines.append(f"[[{self.key(2)}]]")
            elif r < 0.25:
                lines.append(self.rng.choice(["", "# comment é", "   \t", "# [x]"]))
            else:
                lines.append(f"{self.key()} = {self.value()}" + self.rng.choice(["", " # trailing", "\t"]))
        return ("\r\n" if self.rng.random() < 0.1 else "\n").join(lines).encode()


TOKENS = [b"[", b"]", b"[[", b"]]", b"{", b"}", b'"', b"'", b'"""', b"'''", b"\\", b"\\u", b"\\U0001F600", b"=",
          b".", b",", b"\n", b"\r", b"\r\n", b"#", b"\t", b" ", b"\x00", b"\x7f", b"\xff", b"\xc0\xaf", b"\xed\xa0\x80",
          b"\xe2\x82", b"_", b"e", b"+", b"-", b":", b"T", b"Z", b"0x", b"inf", b"nan", b"true", b"1979-05-27",
          b"99999999999999999999", b"a = 1\n", b"[a]\n", b"[[a]]\n", b"a.b = 2\n"]


def mutate(rng, document):
    data = bytearray(document)
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        position = rng.randint(0, len(data))
        if r < 0.4 or not data:
            data[position:position] = rng.choice(TOKENS)
        elif r < 0.6:
            del data[position:position + rng.randint(1, 4)]
        elif r < 0.75:
            data[min(position, len(data) - 1)] = rng.randrange(256)
        elif r < 0.9:
            lines = bytes(data).split(b"\n")
            line = rng.choice(lines)
            lines.insert(rng.randint(0, len(lines)), line)  # duplicate a line: redefinitions
            data = bytearray(b"\n".join(lines))
        else:
            data = data[:position]
    return bytes(data)


def nested(depth, opener=b"[", closer=b"]"):
    return b"a = " + opener * depth + closer * depth


@unittest.skipUnless(os.access(CHECK, os.X_OK), f"vigil-toml-check is not built at {CHECK} (swift build)")
class DifferentialTests(unittest.TestCase):
    def check_all(self, documents, label):
        answers = run_batch(documents)
        problems = []
        accepted = 0
        for document, ours in zip(documents, answers):
            accepted += "error" not in ours
            why = disagreement(document, ours)
            if why:
                problems.append(f"{document!r:.200}: {why}")
        print(f"\n{label}: {len(documents)} documents, {accepted} accepted, {len(documents) - accepted} refused, "
              f"{len(problems)} disagreements", flush=True)
        self.assertEqual(problems, [], "\n".join(problems[:30]))
        return answers

    def test_edge_cases_agree(self):
        answers = self.check_all(VALID + INVALID, "edge cases")
        for document, ours in zip(VALID, answers):
            self.assertNotIn("error", ours, document)
        for document, ours in zip(INVALID, answers[len(VALID):]):
            self.assertIn("error", ours, document)
            self.assertGreaterEqual(ours["line"], 1)
            self.assertGreaterEqual(ours["column"], 1)

    def test_limits(self):
        deep = [nested(MAX_DEPTH - 1), nested(MAX_DEPTH), nested(MAX_DEPTH + 1), nested(5000), nested(100000),
                nested(60, b"{a=", b"}"), nested(5000, b"{a=", b"}"), b"[" + b"a." * 5000 + b"a]",
                b"a" + b".a" * 5000 + b" = 1", b"a = " + b"[" * 100000]
        answers = run_batch(deep)
        self.assertNotIn("error", answers[0])
        for ours in answers[2:5] + answers[6:]:
            self.assertIn("nested deeper than 128", ours.get("error", ""), ours)
        huge = [b"a = '" + b"x" * (1 << 20) + b"'", b"# " + b"x" * (1 << 20), b"a = 1\n" * 200000]
        for ours in run_batch(huge):
            self.assertIn("larger than 1048576 bytes", ours.get("error", ""), ours)
        self.assertNotIn("error", run_batch([b"k = '" + b"x" * ((1 << 20) - 7) + b"'"])[0])

    def test_generated_and_mutated_documents_agree(self):
        rng = random.Random(SEED)
        generator = Generator(rng)
        generated = [generator.document() for _ in range(COUNT)]
        mutated = [mutate(rng, rng.choice(generated + VALID)) for _ in range(COUNT * 2)]
        print(f"\nseed {SEED}", flush=True)
        self.check_all(generated, "generated")
        self.check_all(mutated, "mutated")


if __name__ == "__main__":
    unittest.main()
