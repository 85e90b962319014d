"""Tuned profiles (ciuic.profile/1) read by libciuic's own reader: the rule for a message size."""
import ctypes
import dataclasses
import json
import os

from ciuic import _lib
from ciuic._lib import call


@dataclasses.dataclass(frozen=True)
class Rule:
    op: str
    algo: str          # ring rd hier sparse sign2 powersgd nccl
    codec: str         # canonical codec spelling
    precision: str     # fp32 bf16 fp16
    gate: str
    min_bytes: int
    max_bytes: int     # 0: no upper bound
    bucket_bytes: int
    streams: int
    hierarchy_depth: int
    predicted_us: float
    measured_us: float  # -1: not measured

    @classmethod
    def _from(cls, s):
        return cls(op=s.op.decode(), algo=s.algo.decode(), codec=s.codec.decode(), precision=s.precision.decode(),
                   gate=s.gate.decode(), min_bytes=s.min_bytes, max_bytes=s.max_bytes, bucket_bytes=s.bucket_bytes,
                   streams=s.streams, hierarchy_depth=s.hierarchy_depth, predicted_us=s.predicted_us,
                   measured_us=s.measured_us)


@dataclasses.dataclass(frozen=True)
class Accumulation:
    """The profile's gradient-accumulation suggestion (`ciuic-tune --accumulation`): sync every
    `suggested_steps` micro-batches. candidates: (steps, step_us per micro-batch, gate verdict), k = 1
    first. A training hyperparameter: nothing applies it unless the job opts in
    (ciuic.torch.Accumulation(ddp, "profile", profile=...))."""
    suggested_steps: int
    codec: str
    priced: str   # model | measured
    candidates: tuple

    def gain(self):
        """Step time per micro-batch at k = 1 over the suggestion's (1.0 when it suggests none)."""
        times = {k: t for k, t, _ in self.candidates}
        return times[1] / times[self.suggested_steps] if times.get(self.suggested_steps) else 1.0


class Profile:
    """A profile file, JSON text or the dict json.load gives; malformed input raises InputError."""

    def __init__(self, source):
        handle = ctypes.c_void_p()
        if isinstance(source, dict):
            call("ciuic_profile_parse", json.dumps(source).encode(), b"<profile dict>", ctypes.byref(handle))
            self.path = None
        elif isinstance(source, (str, os.PathLike)) and not str(source).lstrip().startswith("{"):
            call("ciuic_profile_load", os.fsencode(source), ctypes.byref(handle))
            self.path = os.fspath(source)
        elif isinstance(source, str):
            call("ciuic_profile_parse", source.encode(), b"<profile text>", ctypes.byref(handle))
            self.path = None
        else:
            raise TypeError(f"profile: a path, JSON text or dict, not {type(source).__name__}")
        self._h = handle
        # libciuic has checked the text; the accumulation suggestion is read from it here.
        if isinstance(source, dict):
            doc = source
        elif self.path is not None:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
        else:
            doc = json.loads(source)
        acc = doc.get("accumulation")
        self.accumulation = None if acc is None else Accumulation(
            suggested_steps=int(acc["suggested_steps"]), codec=acc["codec"], priced=acc["priced"],
            candidates=tuple((int(c["steps"]), float(c["step_us"]), c["gate"]) for c in acc["candidates"]))
        nodes, ranks, count = ctypes.c_int(), ctypes.c_int(), ctypes.c_size_t()
        call("ciuic_profile_info", self._h, ctypes.byref(nodes), ctypes.byref(ranks), ctypes.byref(count))
        self.nodes, self.ranks = nodes.value, ranks.value
        self.rules = []
        for i in range(count.value):
            s = _lib.RuleStruct()
            call("ciuic_profile_rule_at", self._h, i, ctypes.byref(s))
            self.rules.append(Rule._from(s))

    def __del__(self):
        h = getattr(self, "_h", None)
        if h is not None and h.value and _lib._lib is not None:
            _lib._lib.ciuic_profile_destroy(h)
            self._h = None

    def rule_for(self, nbytes, op="allreduce"):
        """The rule whose size band holds `nbytes` (InputError when none does)."""
        s = _lib.RuleStruct()
        call("ciuic_profile_rule_for", self._h, op.encode(), int(nbytes), ctypes.byref(s))
        return Rule._from(s)


def as_profile(p):
    return p if isinstance(p, Profile) else Profile(p)
