"""What a file holds, judged from its first bytes: text, an image a model can look at, or other binary data.

`read` shows text as numbered lines, returns PNG, JPEG, GIF and WebP files as MCP image content and
refuses everything else that is binary, naming its type. The type comes from magic numbers (a
signature no text file starts with); a file without one is binary when its head holds a NUL byte
(as git decides) or is mostly control bytes or invalid UTF-8, so Latin-1 text still reads as text
(its odd bytes replaced). `visible_controls` is how text output shows the control characters it
keeps: as `\\xNN`, never as raw bytes a terminal or a model would take for something else.
Pure functions, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

__all__ = ["IMAGE_TYPES", "SNIFF_BYTES", "FileKind", "sniff", "visible_controls"]

SNIFF_BYTES = 8192
"""How much of the start of a file `sniff` looks at."""

IMAGE_TYPES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WebP"}
"""The images `read` returns as images: what every provider with vision takes."""


@dataclass(frozen=True, slots=True)
class FileKind:
    """`text`; or binary with a `description` (`PNG image`, `gzip compressed data`, ...) and, for an
    image a model can look at, its `mime_type`."""

    text: bool
    description: str = "text"
    mime_type: str | None = None


TEXT = FileKind(True)

# Signatures at offset 0 that no text file starts with: the file is binary whatever follows.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF87a", "GIF image"),
    (b"GIF89a", "GIF image"),
    (b"%PDF-", "PDF document"),
    (b"PK\x03\x04", "ZIP archive"),
    (b"PK\x05\x06", "ZIP archive"),
    (b"PK\x07\x08", "ZIP archive"),
    (b"\x1f\x8b", "gzip compressed data"),
    (b"\xfd7zXZ\x00", "xz compressed data"),
    (b"\x28\xb5\x2f\xfd", "zstd compressed data"),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip archive"),
    (b"Rar!\x1a\x07", "RAR archive"),
    (b"\x7fELF", "ELF executable or library"),
    (b"\xcf\xfa\xed\xfe", "Mach-O executable"),
    (b"\xce\xfa\xed\xfe", "Mach-O executable"),
    (b"\xca\xfe\xba\xbe", "Java class file or Mach-O universal binary"),
    (b"\x00asm", "WebAssembly module"),
    (b"SQLite format 3\x00", "SQLite database"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "legacy Microsoft Office document (OLE2)"),
    (b"OggS", "Ogg media"),
    (b"fLaC", "FLAC audio"),
    (b"wOFF", "WOFF font"),
    (b"wOF2", "WOFF2 font"),
    (b"II*\x00", "TIFF image"),
    (b"MM\x00*", "TIFF image"),
    (b"\x00\x00\x00\x0cjP  ", "JPEG 2000 image"),
)
# Signatures that text could start with: they only name the type of a file that is binary anyway.
_WEAK_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"BZh", "bzip2 compressed data"),
    (b"MZ", "Windows executable"),
    (b"BM", "BMP image"),
    (b"ID3", "MP3 audio"),
    (b"\x00\x00\x01\x00", "Windows icon"),
    (b"\x00\x01\x00\x00", "TrueType font"),
    (b"OTTO", "OpenType font"),
)
_RIFF = {b"WEBP": "WebP image", b"WAVE": "WAV audio", b"AVI ": "AVI video"}
_FTYP = {b"avif": "AVIF image", b"heic": "HEIC image", b"heix": "HEIC image", b"mif1": "HEIF image"}
_ZIP_KINDS = {
    ".jar": "Java archive",
    ".war": "Java web archive",
    ".docx": "Word document",
    ".xlsx": "Excel workbook",
    ".pptx": "PowerPoint presentation",
    ".odt": "OpenDocument text",
    ".ods": "OpenDocument spreadsheet",
    ".odp": "OpenDocument presentation",
    ".epub": "EPUB book",
    ".whl": "Python wheel",
    ".apk": "Android package",
    ".vsix": "VS Code extension",
}
_MIME = {"PNG image": "image/png", "JPEG image": "image/jpeg", "GIF image": "image/gif", "WebP image": "image/webp"}

# Bytes no text holds (C0 controls but tab, newline, form feed, carriage return and escape).
_BINARY_BYTES = bytes(b for b in range(32) if b not in (0x09, 0x0A, 0x0C, 0x0D, 0x1B))
_CONTROL_RATIO = 0.1
_INVALID_UTF8_RATIO = 0.3


def _kind(description: str) -> FileKind:
    return FileKind(False, description, _MIME.get(description))


def _signature(head: bytes, path: PurePath) -> str | None:
    for magic, description in _MAGIC:
        if head.startswith(magic):
            if description == "ZIP archive" and (kind := _ZIP_KINDS.get(path.suffix.lower())) is not None:
                return f"{kind} (ZIP)"
            return description
    if head.startswith(b"RIFF") and head[8:12] in _RIFF:
        return _RIFF[head[8:12]]
    if head[4:8] == b"ftyp":
        return _FTYP.get(head[8:12], "MP4/QuickTime media")
    if head[257:262] == b"ustar":
        return "tar archive"
    return None


def _mostly_binary(head: bytes) -> bool:
    if not head:
        return False
    if b"\x00" in head:
        return True
    if len(head) - len(head.translate(None, _BINARY_BYTES)) > len(head) * _CONTROL_RATIO:
        return True
    decoded = head.decode("utf-8", "replace")
    cut = decoded.endswith("\ufffd")  # a character split at the end of the head is not an error
    return decoded.count("\ufffd") - cut > len(head) * _INVALID_UTF8_RATIO


def sniff(head: bytes, path: PurePath) -> FileKind:
    """What a file whose first bytes are `head` (up to `SNIFF_BYTES`) holds; `path` refines a ZIP's type."""
    signature = _signature(head, path)
    if signature is not None:
        return _kind(signature)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) and b"\x00" in head:
        return FileKind(False, "UTF-16 text (convert it with `iconv -f UTF-16 -t UTF-8`)")
    if not _mostly_binary(head):
        return TEXT
    for magic, description in _WEAK_MAGIC:
        if head.startswith(magic):
            return _kind(description)
    return FileKind(False, "binary data")


_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible_controls(text: str) -> str:
    """`text` with every control character but tab and newline shown as `\\xNN` (C0, DEL and C1)."""
    if not _CONTROLS.search(text):
        return text
    return _CONTROLS.sub(lambda match: f"\\x{ord(match[0]):02x}", text)
