"""Rules shared by the zip and tar analyzers, and their member-name checks (re-exported
from ``scanner.core.pathnames``, the one place for every name used as a path)."""

from __future__ import annotations

from scanner.core.model import Severity, Verdict
from scanner.core.pathnames import escapes as escapes
from scanner.core.pathnames import normalized as normalized
from scanner.core.pathnames import reference_escapes as reference_escapes
from scanner.core.rules import rule

V, S = Verdict, Severity

ZIP_NOT_ALLOWED = rule(
    "format.zip_not_allowed", V.POLICY, S.MEDIUM,
    "Zip archive: not an allowed weight format",
    "Ship weights as safetensors files, not inside an archive.",
)
TORCH_ZIP_NOT_ALLOWED = rule(
    "format.torch_zip_not_allowed", V.POLICY, S.MEDIUM,
    "PyTorch zip checkpoint (torch.save): loading it unpickles data.pkl",
    "Convert the checkpoint to safetensors (e.g. safetensors.torch.save_file) and ship that.",
)
NPZ_NOT_ALLOWED = rule(
    "format.npz_not_allowed", V.POLICY, S.MEDIUM,
    "NumPy .npz archive: not an allowed weight format",
    "Convert the arrays to safetensors (safetensors.numpy.save_file).",
)
KERAS_NOT_ALLOWED = rule(
    "format.keras_not_allowed", V.POLICY, S.MEDIUM,
    "Keras model archive (.keras / .h5): not an allowed weight format",
    "Export the weights to safetensors; rebuild the architecture from trusted code.",
)
TAR_NOT_ALLOWED = rule(
    "format.tar_not_allowed", V.POLICY, S.MEDIUM,
    "Tar archive: not an allowed weight format",
    "Unpack trusted archives before scanning and ship safetensors files.",
)
ARCHIVE_UNSUPPORTED = rule(
    "archive.unsupported", V.MALFORMED, S.HIGH,
    "Archive format or compression method the scanner cannot verify (refused, fail closed)",
    "Repack the content as plain files (or a stored/deflated zip) and scan again.",
)
ARCHIVE_MALFORMED = rule(
    "archive.malformed", V.MALFORMED, S.HIGH,
    "Archive structure cannot be read",
    "Recreate the archive with a standard tool; do not load this file.",
)
ARCHIVE_INTEGRITY = rule(
    "archive.integrity_error", V.MALFORMED, S.HIGH,
    "Archive inconsistency that makes readers disagree (CRC, flags, names, offsets); "
    "loaders such as torch.load ignore it, so scanners must not skip the member",
    "Recreate the archive with a standard tool; treat the source as untrusted.",
)
ARCHIVE_HIDDEN = rule(
    "archive.hidden_member", V.MALFORMED, S.HIGH,
    "Member present as a local header but absent from the central directory",
    "Recreate the archive with a standard tool; treat the source as untrusted.",
)
ARCHIVE_DUPLICATE = rule(
    "archive.duplicate_name", V.MALFORMED, S.HIGH,
    "Two members share a name: readers disagree on which one is loaded",
    "Recreate the archive so every member name is unique.",
)
ARCHIVE_OVERLAP = rule(
    "archive.overlapping_members", V.MALFORMED, S.HIGH,
    "Members share or overlap their data (zip bomb or reader confusion)",
    "Recreate the archive with a standard tool.",
)
ARCHIVE_TRAVERSAL = rule(
    "archive.path_traversal", V.MALICIOUS, S.CRITICAL,
    "Member name or link target escapes the extraction folder (zip-slip: '..' or absolute)",
    "Do not extract this archive; member names must be relative and free of '..'.",
)
ARCHIVE_LINK = rule(
    "archive.link_member", V.POLICY, S.MEDIUM,
    "Archive member is a symbolic or hard link",
    "Replace links by regular files before packaging.",
)
ARCHIVE_SPECIAL = rule(
    "archive.special_member", V.MALFORMED, S.HIGH,
    "Archive member is a device node, FIFO or other special file",
    "Remove special files from the archive.",
)
