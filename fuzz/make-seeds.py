#!/usr/bin/env python3
"""Regenerates the C targets' seed corpora under fixtures/fuzz/ (bspatch/, cbz/)
and the bspatch target's old file, from fixtures/sample-app with Debian's bsdiff.
The Swift targets' seeds (zip/, manifest/, setcookie/) are small hand-made files."""
import bz2, os, pathlib, shutil, struct, subprocess, tempfile

root = pathlib.Path(__file__).resolve().parent.parent
app = root / "fixtures" / "sample-app"
out = root / "fixtures" / "fuzz"
parts = ["index.html", "pages/about.html", "css/app.css"]

def version(v, extra=()):
    return b"".join((app / v / p).read_bytes() for p in list(parts) + list(extra))

def offt(n):
    return struct.pack("<Q", n if n >= 0 else (-n) | (1 << 63))

def raw_patch(triples, diff, extra, new_size, extra_level=9):
    ctrl = b"".join(offt(x) + offt(y) + offt(z) for x, y, z in triples)
    c, d = bz2.compress(ctrl, 9), bz2.compress(diff, 9)
    return b"BSDIFF40" + offt(len(c)) + offt(len(d)) + offt(new_size) + c + d + bz2.compress(extra, extra_level)

old = version("1.0.0")
(out / "bspatch").mkdir(parents=True, exist_ok=True)
(out / "cbz").mkdir(parents=True, exist_ok=True)
(out / "bspatch-old.bin").write_bytes(old)
news = {
    "to-1.1.0": version("1.1.0"),
    "to-1.2.0": version("1.2.0", ["pages/cart.html"]),
    "to-1.3.0": version("1.3.0"),
    "identical": old,
    "one-byte": b"x",
    "png": (app / "1.2.0/img/logo.png").read_bytes(),
    "reversed": old[::-1],
}
with tempfile.TemporaryDirectory() as tmp:
    t = pathlib.Path(tmp)
    (t / "old").write_bytes(old)
    for name, new in news.items():
        (t / "new").write_bytes(new)
        subprocess.run(["bsdiff", str(t / "old"), str(t / "new"), str(t / "patch")], check=True)
        (out / "bspatch" / f"{name}.patch").write_bytes((t / "patch").read_bytes())
# Level-1 bzip2 streams of periodic text: several 100k blocks in a few hundred
# bytes, so the extra stream's block splitter and second worker get work.
periodic = (b"abcdefghij" * 25000)[:240000]
(out / "bspatch" / "multiblock-extra.patch").write_bytes(
    raw_patch([(len(old), len(periodic), -len(old))], bytes(len(old)), periodic, len(old) + len(periodic), 1))
(out / "bspatch" / "empty-new.patch").write_bytes(raw_patch([], b"", b"", 0))
# Zero diff runs (the fast decoder's memset path) and a backwards old seek.
(out / "bspatch" / "zero-runs.patch").write_bytes(
    raw_patch([(1000, 10, 500), (1500, 0, -2000), (len(old), 5, 0)], bytes(2500 + len(old)), b"0123456789abcde",
              2500 + len(old) + 15))

streams = {
    "text-9": (bz2.compress(old, 9)),
    "empty": bz2.compress(b"", 9),
    "zeros-9": bz2.compress(bytes(70000), 9),
    "bytes-1": bz2.compress(bytes(range(256)) * 8, 1),
    "multiblock-1": bz2.compress(periodic, 1),
    "runs-of-four": bz2.compress(b"aaaab" * 50 + b"zzzz", 9),
}
for name, data in streams.items():
    (out / "cbz" / f"{name}.bz2").write_bytes(data)

# Swift targets: manifests as the publisher writes them, Set-Cookie lines as
# servers send them, zips as Info-ZIP writes them (plus a zip64 one).
import hashlib, json, zipfile
(out / "manifest").mkdir(exist_ok=True)
h = lambda b: hashlib.sha256(b).hexdigest()
full = {"app": "sample-app", "version": "1.1.0", "miniVersion": "1.0.0", "isPatch": False,
        "url": "sample-app/1.1.0.zip", "size": 41234, "sha256": h(b"a"), "packageSha256": h(b"a"),
        "whitelist": ["https://h5.example.com/mall/", "http://127.0.0.1:8080/"], "networkType": "any", "rollout": 100}
patch = dict(full, isPatch=True, baseVersion="1.0.0", url="sample-app/1.0.0-1.1.0.bsdiff", size=383,
             sha256=h(b"p"), fullUrl="sample-app/1.1.0.zip", fullSize=41234, fullSha256=h(b"a"),
             expires="2026-12-31T00:00:00Z", networkType="wifi", rollout=30)
gzip_full = dict(full, compression="gzip", sha256=h(b"g"), expires="2027-01-15T08:30:00.250+02:00", status=0)
for name, m in {"full": full, "patch": patch, "gzip": gzip_full}.items():
    (out / "manifest" / f"{name}.json").write_text(json.dumps(m, indent=2) + "\n")
(out / "manifest" / "long-version.json").write_text(json.dumps(dict(full, version="999999999.2.3.4.5.6.7.8")))
(out / "setcookie").mkdir(exist_ok=True)
cookies = [
    "session=abc123; Path=/; HttpOnly; Secure; SameSite=Lax",
    "id=a3fWa; Expires=Wed, 21 Oct 2015 07:28:00 GMT; Domain=.example.com",
    "cart=1; Max-Age=3600; Path=/shop",
    "old=1; expires=Sunday, 06-Nov-94 08:49:37 GMT",
    "asc=2; Expires=Sun Nov  6 08:49:37 1994; Max-Age=-1",
    "lang=en-US; Domain=co.uk; SameSite=None; Secure",
    "q=\"quoted value\"; path=/a/b; max-age=99999999999999999999",
]
for i, line in enumerate(cookies):
    (out / "setcookie" / f"line-{i}.txt").write_text(line)
(out / "zip").mkdir(exist_ok=True)
def write_zip(name, files, **kw):
    with zipfile.ZipFile(out / "zip" / name, "w", **kw) as z:
        for n, b in files:
            z.writestr(n, b)
write_zip("stored.zip", [("index.html", b"<html></html>"), ("css/", b""), ("css/a.css", b"a{}")])
write_zip("deflated.zip", [("js/app.js", (app / "1.0.0/pages/about.html").read_bytes()[:400])],
          compression=zipfile.ZIP_DEFLATED)
write_zip("nul-name.zip", [("a.html", b"x")])
data = (out / "zip" / "nul-name.zip").read_bytes().replace(b"a.html", b"a\0html")
(out / "zip" / "nul-name.zip").write_bytes(data)
with zipfile.ZipFile(out / "zip" / "comment.zip", "w") as z:
    z.comment = b"PK\x05\x06 fake end record inside the comment"
    z.writestr("x", b"y")
# zip64 end records (what an archive of more than 65535 entries carries), forced small.
import io
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w", allowZip64=True) as z:
    z.writestr("big.txt", b"z" * 10)
raw = buf.getvalue()
eocd = raw.rfind(b"PK\x05\x06")
cd_size, cd_offset = struct.unpack("<II", raw[eocd + 12:eocd + 20])
body = raw[:eocd]
z64 = struct.pack("<IQHHIIQQQQ", 0x06064b50, 44, 45, 45, 0, 0, 1, 1, cd_size, cd_offset)
loc = struct.pack("<IIQI", 0x07064b50, 0, len(body), 1)
end = struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
(out / "zip" / "zip64.zip").write_bytes(body + z64 + loc + end)
# The layout target (ZipCentralDirectory as the splitter, the skeleton and the view read
# it): plain stored zips whose entries must be located, and each way a zip is not plain.
(out / "layout").mkdir(exist_ok=True)
def write_layout(name, files, **kw):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", **kw) as z:
        for n, b in files:
            z.writestr(n, b)
    (out / "layout" / name).write_bytes(buf.getvalue())
write_layout("stored.zip", [("index.html", b"<html></html>"), ("css/", b""), ("css/a.css", b"a{}"), ("empty.txt", b"")])
extra = zipfile.ZipInfo("x.js")
extra.extra = struct.pack("<HHB I", 0x5455, 5, 1, 0)  # an extended timestamp: the data starts after it
write_layout("extra-field.zip", [(extra, b"let x = 1")])
write_layout("deflated.zip", [("a.txt", b"a" * 200)], compression=zipfile.ZIP_DEFLATED)
# A data descriptor on a stored entry: not plain (the sizes follow the data).
with zipfile.ZipFile(out / "layout" / "descriptor.zip", "w") as z:
    z.writestr("d.txt", b"dd")
data = bytearray((out / "layout" / "descriptor.zip").read_bytes())
data[6] |= 0x08
cd = data.rfind(b"PK\x01\x02")
data[cd + 8] |= 0x08
(out / "layout" / "descriptor.zip").write_bytes(bytes(data))
(out / "layout" / "zip64.zip").write_bytes((out / "zip" / "zip64.zip").read_bytes())
# The splitter target (ZipLocalStream, the stream the splitter reads a patch's output
# through) starts from the same zips: streamed, they are walked from their first byte.
(out / "splitter").mkdir(exist_ok=True)
for seed in (out / "layout").iterdir():
    shutil.copyfile(seed, out / "splitter" / seed.name)
