"""The pickle format family: raw pickle streams (protocols 0-5, any name) and pre-1.6
``torch.save`` files (magic pickle + pickles + raw storages).

This package's top level is light (the specs and the sniff predicate); the pickle machine
(``analyze``, ``vm``, ``ops`` ...) is imported when a pickle is first analysed.
"""

from __future__ import annotations

from scanner.core.spec import Format, FormatSpec, Probe
from scanner.formats.pickle.sniff import TORCH_LEGACY_MAGIC, looks_like_pickle

PICKLE = Format("pickle")
TORCH_LEGACY = Format("torch-legacy")
# Names a loader hands to pickle (torch.load, joblib.load, pickle.load): text or anything
# else under such a name is never clean (issue 10: plain text named .pkl passed as clean).
PICKLE_NAMES = (".pkl", ".pickle", ".joblib", ".dill", ".pt", ".pth", ".ckpt")
_ANALYZE = "scanner.formats.pickle.analyze"

SPECS = (
    FormatSpec(PICKLE, (_ANALYZE, "analyze_pickle"), claims=PICKLE_NAMES,
               probes=(Probe(110, lambda h: looks_like_pickle(h.head)),),
               name_hints=(".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt", ".joblib",
                           ".dill", ".pdparams", ".pdopt")),
    FormatSpec(TORCH_LEGACY, (_ANALYZE, "analyze_torch_legacy"), order=100,
               magic=(TORCH_LEGACY_MAGIC,), claims=PICKLE_NAMES),
)
