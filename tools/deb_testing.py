"""Small .deb files for tests: the `ar` archive dpkg-deb writes."""

import io
import tarfile


def tar_xz(entries):
    """A data tar: (name, bytes) files (mode 0755) and (name, target) links."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:xz") as tar:
        for name, value in entries:
            info = tarfile.TarInfo(name)
            if isinstance(value, bytes):
                info.size, info.mode = len(value), 0o755
                tar.addfile(info, io.BytesIO(value))
            else:
                info.type, info.linkname = tarfile.SYMTYPE, value
                tar.addfile(info)
    return out.getvalue()


def deb(entries):
    """An `ar` archive as dpkg-deb writes one: debian-binary, control, data."""
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", tar_xz([])),
               ("data.tar.xz", tar_xz(entries))]
    out = b"!<arch>\n"
    for name, body in members:
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(body):<10}`\n".encode()
        out += body + (b"\n" if len(body) % 2 else b"")
    return out
