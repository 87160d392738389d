"""E2B's Python SDK, unchanged and configured only by the environment
(E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, E2B_VOLUME_API_URL): Volume's
control calls, its files through the volume content API with the
volume's own token, and a sandbox mounting it (volume_mounts).  Run by
tests/.venv-e2b's python.  usage: e2b_volumes.py OTHER_TENANTS_KEY — one
JSON line per check."""
import io
import sys

from e2b import Sandbox, Volume
from e2b.exceptions import NotFoundException, VolumeException
from checks import check, fails

other = sys.argv[1]

vol = Volume.create("sdk-data")
check(vol.volume_id and vol.name == "sdk-data" and vol.token.startswith("sgvol_"),
      "Volume.create: its id, name and token", (vol.volume_id, vol.name, vol.token))
info = Volume.get_info(vol.volume_id)
check(info.volume_id == vol.volume_id and info.name == "sdk-data" and info.token == vol.token,
      "Volume.get_info", info)
check([v.name for v in Volume.list()] == ["sdk-data"], "Volume.list: the tenant's own",
      Volume.list())
e = fails(Volume.get_info, vol.volume_id, api_key=other)
check(isinstance(e, NotFoundException), "another tenant's key: Volume.get_info is not found", e)
check(vol.volume_id not in [v.volume_id for v in Volume.list(api_key=other)],
      "another tenant's list does not have it", Volume.list(api_key=other))
check(Volume.destroy("00000000-0000-4000-8000-000000000000") is False,
      "Volume.destroy of an unknown id: False")

vol.write_file("/hello.txt", "Hello, World!")
check(vol.read_file("/hello.txt") == "Hello, World!", "write_file and read_file (text)")
vol.write_file("/bin.dat", bytes(range(256)))
check(vol.read_file("/bin.dat", format="bytes") == bytes(range(256)), "bytes, every value")
vol.write_file("/stream.txt", io.BytesIO(b"streamed" * 100000))
check(b"".join(vol.read_file("/stream.txt", format="stream")) == b"streamed" * 100000,
      "a file-like object streamed up, read back as a stream (800 kB)")
e = fails(vol.write_file, "/hello.txt", "again", force=False)
check(isinstance(e, VolumeException), "an existing file without force: refused", e)
vol.write_file("/hello.txt", "replaced", force=True)
check(vol.read_file("/hello.txt") == "replaced", "force=True replaces it")
st = vol.write_file("/meta.txt", "m", uid=1000, gid=1000, mode=0o644)
check((st.uid, st.gid, st.mode, st.type.value) == (1000, 1000, 0o644, "file"),
      "uid, gid and mode at write", st)
d = vol.make_dir("/nested/deep/path", force=True)
check(d.type.value == "directory" and d.path == "/nested/deep/path", "make_dir with force", d)
e = fails(vol.make_dir, "/no/parent")
check(isinstance(e, NotFoundException), "make_dir without force under a missing parent: 404", e)
vol.write_file("/nested/deep/path/f.txt", "deep")
names = sorted(x.path for x in vol.list("/nested", depth=3))
check(names == ["/nested/deep", "/nested/deep/path", "/nested/deep/path/f.txt"],
      "list with depth 3", names)
check(vol.exists("/hello.txt") and not vol.exists("/missing.txt"), "exists")
up = vol.update_metadata("/hello.txt", mode=0o600)
check(up.mode == 0o600 and up.path == "/hello.txt", "update_metadata: the mode", up)
vol.remove("/nested")
check(not vol.exists("/nested/deep/path/f.txt"), "remove: a directory and all in it")
e = fails(vol.read_file, "/nested/deep/path/f.txt")
check(isinstance(e, NotFoundException), "reading a removed file: not found", e)

sbx = Sandbox.create(timeout=120, volume_mounts={"/mnt/vol": vol, "/home/user/ro": "sdk-data"})
r = sbx.commands.run("cat /mnt/vol/meta.txt && echo from-sandbox > /mnt/vol/out.txt")
check(r.exit_code == 0 and r.stdout == "m", "the sandbox reads the volume at its mount", r)
check(vol.read_file("/out.txt") == "from-sandbox\n", "and what it writes there is in the volume")
e = fails(Volume.destroy, vol.volume_id)
check(isinstance(e, VolumeException) and "mounted" in str(e),
      "Volume.destroy while a sandbox mounts it: refused, naming why", e)
sbx.kill()
check(Volume.destroy(vol.volume_id) is True, "Volume.destroy once no sandbox mounts it")
e = fails(Volume.get_info, vol.volume_id)
check(isinstance(e, NotFoundException), "a destroyed volume is not found", e)
