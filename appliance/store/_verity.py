"""fs-verity (Linux ``FS_IOC_ENABLE_VERITY`` / ``FS_IOC_MEASURE_VERITY``) for store files.

With fs-verity a file becomes immutable and the kernel checks every page it reads against a
Merkle tree whose root (the file's fs-verity digest) ``measure`` returns in O(1). Import
enables it where the filesystem supports it (ext4/f2fs/btrfs built with ``CONFIG_FS_VERITY``
and, for ext4, ``mkfs.ext4 -O verity``) and records the digests; the serve-start check then
compares the measured digests instead of re-hashing the whole model.

Source: linux ``include/uapi/linux/fsverity.h`` and Documentation/filesystems/fsverity.rst.
On the development machine (kernel 6.18 without ``CONFIG_FS_VERITY``) enabling fails with
EOPNOTSUPP even on a loop-mounted ``mkfs.ext4 -O verity`` image, so this path is exercised
only where the kernel has it (tests skip otherwise).
"""

from __future__ import annotations

import errno
import fcntl
import struct

FS_IOC_ENABLE_VERITY = 0x40806685   # _IOW('f', 133, struct fsverity_enable_arg) (128 bytes)
FS_IOC_MEASURE_VERITY = 0xC0046686  # _IOWR('f', 134, struct fsverity_digest)
FS_VERITY_HASH_ALG_SHA256 = 1
BLOCK_SIZE = 4096
_UNSUPPORTED = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL, errno.ENOSYS}


def enable(fd: int) -> bool:
    """Enable fs-verity (SHA-256, 4 KiB blocks, no salt) on ``fd``, a file opened read-only
    with no writer left. Returns False when the filesystem does not support it; other
    ``OSError`` propagate. Already enabled (EEXIST) counts as success."""
    arg = struct.pack("=IIIIQII Q88x", 1, FS_VERITY_HASH_ALG_SHA256, BLOCK_SIZE, 0, 0, 0, 0,
                      0)
    try:
        fcntl.ioctl(fd, FS_IOC_ENABLE_VERITY, arg)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            return True
        if exc.errno in _UNSUPPORTED:
            return False
        raise
    return True


def measure(fd: int) -> str | None:
    """The file's fs-verity digest as ``sha256:<hex>``, or None when fs-verity is not
    enabled on it (ENODATA) or not supported."""
    buf = bytearray(struct.pack("=HH", 0, 64) + bytes(64))
    try:
        fcntl.ioctl(fd, FS_IOC_MEASURE_VERITY, buf, True)
    except OSError as exc:
        if exc.errno == errno.ENODATA or exc.errno in _UNSUPPORTED:
            return None
        raise
    algorithm, size = struct.unpack_from("=HH", buf)
    if algorithm != FS_VERITY_HASH_ALG_SHA256 or size != 32:
        return None
    return "sha256:" + bytes(buf[4:4 + size]).hex()
