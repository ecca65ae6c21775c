"""A Keras layer is judged by what it references: TensorFlow's own Keras
(``tensorflow.keras.*``), TensorFlow value classes (``TensorShape``, ``TensorSpec``,
``DType``) and tf.keras op layers (``TFOpLambda``/``SlicingOpLambda``) whose ``function``
is a tensor op are safe; an op layer naming file I/O or a Python callback, and any module
outside Keras/TensorFlow, stay ``keras.unsafe_object``. Configs are written here as tf.keras
and Keras 3 write them (Keras "Serialization and saving" guide); nothing is loaded."""

from __future__ import annotations

import json

import pytest

from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Finding, Verdict, worst
from scanner.formats.keras import analyze_hdf5, analyze_keras_config


def _model(*layers: dict[str, object]) -> dict[str, object]:
    return {"module": "keras", "class_name": "Functional", "config": {"layers": list(layers)}}


def _op(function: str, cls: str = "TFOpLambda") -> dict[str, object]:
    return {"module": "keras.layers", "class_name": cls, "config": {
        "name": f"tf.{function}", "trainable": True, "dtype": "float32",
        "function": function}}


SAFE_LAYERS = [
    {"module": "tensorflow.keras.layers", "class_name": "Dense", "config": {"units": 4}},
    {"module": "tensorflow.python.keras.layers.core", "class_name": "Dense",
     "config": {"units": 2}},
    {"module": "keras.layers", "class_name": "InputLayer", "config": {
        "batch_shape": {"module": "tensorflow", "class_name": "TensorShape",
                        "config": [None, 4]},
        "dtype": {"module": "tensorflow", "class_name": "DType", "config": "float32"}}},
    _op("math.add"), _op("nn.relu"), _op("reshape"), _op("__operators__.getitem",
                                                         "SlicingOpLambda"),
    _op("compat.v1.transpose"),
]
UNSAFE_LAYERS = [
    _op("io.write_file"), _op("io.read_file"), _op("py_function"), _op("numpy_function"),
    _op("raw_ops.WriteFile"), _op("saved_model.load"), _op("math.add.__globals__"),
    {"module": "tensorflow", "class_name": "py_function", "config": {}},
    {"module": "tensorflow.io", "class_name": "write_file", "config": {}},
    {"module": "os", "class_name": "system", "config": {}},
]


def _keras_ids(findings: list[Finding]) -> set[str]:
    return {f.rule_id for f in findings if f.rule_id.startswith("keras.")}


@pytest.mark.parametrize("layer", SAFE_LAYERS, ids=lambda d: json.dumps(d)[:60])
def test_layers_referencing_only_safe_tensorflow_are_clean(layer: dict[str, object]) -> None:
    data = json.dumps(_model(layer)).encode()
    assert analyze_keras_config(ScanContext(), "m.keras!config.json", data) == []
    h5 = b"\x89HDF\r\n\x1a\n" + bytes(512) + data + bytes(64)
    findings = analyze_hdf5(ScanContext(), BytesBlob("m.h5", h5))
    assert _keras_ids(findings) == set() and worst(findings) is Verdict.POLICY, findings


@pytest.mark.parametrize("layer", UNSAFE_LAYERS, ids=lambda d: json.dumps(d)[:60])
def test_layers_referencing_code_stay_malicious(layer: dict[str, object]) -> None:
    data = json.dumps(_model(layer)).encode()
    findings = analyze_keras_config(ScanContext(), "m.keras!config.json", data)
    assert _keras_ids(findings) == {"keras.unsafe_object"}, findings
    h5 = b"\x89HDF\r\n\x1a\n" + bytes(512) + data + bytes(64)
    assert worst(analyze_hdf5(ScanContext(), BytesBlob("m.h5", h5))) is Verdict.MALICIOUS
