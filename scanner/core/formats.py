"""Artifact formats, decided from content by ``scanner.scan.sniff.sniff``."""

from __future__ import annotations

import enum


class Format(enum.Enum):
    SAFETENSORS = "safetensors"
    PICKLE = "pickle"  # raw pickle stream (protocols 0-5), any name
    TORCH_LEGACY = "torch-legacy"  # pre-1.6 torch.save: magic pickle + pickles + raw storages
    ZIP = "zip"  # generic zip; torch zip checkpoints, .npz, .keras are zips
    TAR = "tar"  # tar container (old torch tar checkpoints too)
    SEVENZIP = "7z"
    NPY = "npy"  # NumPy .npy (object dtype carries a pickle)
    HDF5 = "hdf5"  # Keras .h5
    ONNX = "onnx"
    GGUF = "gguf"
    COMPRESSED = "compressed"  # single-file gzip/bzip2/xz/zstd/lz4 (tar.gz too)
    R = "r"  # R serialization (.rds, .rdata)
    TENSORFLOW = "tensorflow"  # SavedModel / GraphDef / keras_metadata.pb protobuf
    TFLITE = "tflite"
    XML = "xml"  # OpenVINO IR, PMML, other XML
    PYTHON = "python"  # Python source
    JINJA = "jinja"  # Jinja template text
    JSON = "json"
    TEXT = "text"  # other UTF-8 text
    EMPTY = "empty"
    UNKNOWN = "unknown"  # unrecognised binary
