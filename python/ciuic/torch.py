"""PyTorch DDP on the ciuic runtime: a communication hook that hands every bucket to libciuic.

    import ciuic.torch
    ddp = DistributedDataParallel(model, **ciuic.torch.ddp_kwargs("my.profile.json"))
    state, hook = ciuic.torch.comm_hook("my.profile.json", module=model)
    ddp.register_comm_hook(state, hook)
    ...
    torch.save({"model": ..., "optimizer": ..., "ciuic": state.state_dict()}, f"ckpt.{rank}.pt")
    state.load_state_dict(torch.load(f"ckpt.{rank}.pt")["ciuic"])

The reduction is the C++ runtime itself, the code `ciuic-bench --backend ciuic` and `ciuic-tune
--mode measure` time: comm_hook() builds a ciuic communicator from the job's own rendezvous (the
torch.distributed store: gloo over TCP for CPU buckets, NCCL for CUDA buckets, its unique id passed
through the store; no port or file beyond what torchrun already needs) and a runtime from the
profile (ciuic_runtime_create_profile). Each bucket is queued on the runtime's own thread
(ciuic_allreduce_async) and the hook returns a torch.futures.Future at once, completed by the
runtime, so the rest of backward overlaps the reduction. The runtime picks the bucket's rule by its
byte size (fp16/bf16 buckets by their own bytes, and sent at their own width where the rule is
lossless), cuts it into the rule's bucket_bytes and applies its algorithm, codec, precision and
streams. Every rank ends with the same bits. NaN/Inf in a gradient reaches every rank (the bucket is
summed uncompressed, as DDP's default hook would, so a GradScaler sees it) and never enters the
error feedback.

What stays in Python is bookkeeping: which tensor id a bucket is (its index, size and parameters:
names when `module` is given, shapes otherwise), error feedback following parameters across DDP's
bucket rebuild (the runtime's residual moved between tensor ids), a resumed run's first
all-parameter bucket reduced as the saved buckets were (so it continues bit for bit), and the
checkpoint (the runtime's own state file inside state_dict()).
"""
import ctypes
import hashlib
import itertools
import os
import tempfile
import threading
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist

from ciuic import _lib
from ciuic.errors import InputError, UsageError
from ciuic.profile import as_profile

STATE_FORMAT = "ciuic.ddp_hook/2"
PROPAGATE_NONFINITE, ANY_WORLD = 1, 2
_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_comm_counter = itertools.count()


def ddp_kwargs(profile):
    """Keyword arguments for DistributedDataParallel from a profile: bucket_cap_mb is the bucket size of
    the profile's largest band (its last rule, as `ciuic-tune export --format ddp`), in MiB, fractional
    when it is not a whole MiB."""
    p = as_profile(profile)
    big = p.rules[-1]
    mb = big.bucket_bytes / float(1 << 20)
    return {"bucket_cap_mb": int(mb) if mb == int(mb) else mb}


def comm_hook(profile, process_group=None, module=None, ranks_per_node=0, device=None, allow_world_mismatch=False,
              timeout=300.0, transport=None, native="process_group"):
    """(state, hook) for DistributedDataParallel.register_comm_hook(state, hook). Collective: every
    rank calls it, at the same point.

    profile: a profile path, JSON text, dict or ciuic.Profile. It must have been tuned for this job's
    world (ranks, nodes, cpu or gpu): another world is a UsageError here naming both, unless
    allow_world_mismatch. process_group: the DDP's group (None: the default group, whose store the
    ranks meet through). module: the model (or its DDP): keys the state by parameter names, so error
    feedback follows parameters across DDP's bucket rebuild and resumes bit for bit; its parameters'
    device is the buckets' (else `device`, default cpu). ranks_per_node: the hier algorithm's node
    size (0: by host name). timeout: seconds gloo's rendezvous and each of its calls may take, and
    the runtime's deadline (no bucket done in that long ends the process with exit 2, naming the rank
    waited on; $CIUIC_TIMEOUT, when set, is that deadline instead); 0: no limit, no deadline (a
    stopped rank is then never named). A rank that spends longer than this outside the training
    loop while the others reduce (a checkpoint written by rank 0 alone) ends the job: raise it to
    cover that. NCCL's start-up (CUDA buckets) keeps $CIUIC_TIMEOUT or 60 s.
    transport: for CUDA buckets "nccl" (the default) or "gloo" (device buffers staged through host
    memory: several processes on one GPU, which NCCL refuses); CPU buckets always take gloo.
    native: where a bucket whose rule is the transport's own allreduce, lossless in fp32 (algo nccl,
    codec none, precision fp32), is reduced: "process_group" (the default) hands it to the job's own
    process group, as DDP's default hook does (the average by the same division first), so a lossless
    profile costs what DDP's default costs; "runtime" reduces it in the ciuic runtime like every other
    rule. `state.delegated` counts the buckets handed over.
    """
    state = HookState(profile, process_group=process_group, module=module, ranks_per_node=ranks_per_node,
                      device=device, allow_world_mismatch=allow_world_mismatch, timeout=timeout, transport=transport,
                      native=native)
    return state, hook


def hook(state, bucket):
    """The DDP communication hook: state is the HookState from comm_hook."""
    return state._submit(bucket)


def _digest(parts):
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


# ---- the job's store, for the C API's two callbacks ---------------------------------------------------
_SET_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)
_GET_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t,
                           ctypes.POINTER(ctypes.c_size_t))
_DONE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)


class _Store:
    """torch.distributed's store seen through ciuic_store_set_fn / ciuic_store_get_fn."""

    def __init__(self, store):
        self.store = store
        self.values = {}
        self.set_fn = _SET_FN(self._set)
        self.get_fn = _GET_FN(self._get)

    def _set(self, _user, key, value, size):
        try:
            self.store.set(key.decode(), ctypes.string_at(value, size) if size else b"")
            return 0
        except Exception:  # noqa: BLE001 - the C side reports the key
            return 1

    def _get(self, _user, key, buf, cap, size):
        try:
            k = key.decode()
            v = self.values.get(k)
            if v is None:
                v = bytes(self.store.get(k))
                self.values[k] = v
            size[0] = len(v)
            if len(v) <= cap:
                ctypes.memmove(buf, v, len(v))
                del self.values[k]
            return 0
        except Exception:  # noqa: BLE001 - a missing key after the store's timeout
            return 1


def _default_store(process_group):
    if process_group not in (None, dist.group.WORLD):
        raise UsageError(1, "ciuic DDP hook: the runtime meets through the default group's store; pass "
                            "process_group=None (a subgroup has no store of its own)")
    from torch.distributed import distributed_c10d
    return distributed_c10d._get_default_store()


class _Entry:
    """One DDP bucket layout: its tensor id and the parameters in it."""

    def __init__(self, key, index, n, dtype, ident, sizes, named):
        self.key, self.index, self.n, self.dtype, self.named = key, index, n, dtype, named
        self.ident, self.sizes = list(ident), list(sizes)
        self.offsets = [int(o) for o in np.cumsum([0] + list(sizes))[:-1]] if sizes else []
        # The runtime keys error feedback by this id: the whole key (index, size, dtype, parameters), so two
        # buckets of equal shapes are two tensors.
        self.tid = int(hashlib.sha1(key.encode()).hexdigest()[:16], 16) & ((1 << 63) - 1)
        self.last_used = 0


class HookState:
    """Per-rank state of the ciuic DDP hook (see the module docstring): the ciuic communicator and
    runtime, the bucket bookkeeping, and state_dict()/load_state_dict() for checkpoints. `record = True`
    keeps (tensor id, dtype, bucket before, bucket after) per reduced bucket in `records` (tests)."""

    def __init__(self, profile, process_group=None, module=None, ranks_per_node=0, device=None,
                 allow_world_mismatch=False, timeout=300.0, transport=None, native="process_group"):
        if native not in ("process_group", "runtime"):
            raise UsageError(1, f"ciuic DDP hook: native={native!r}: \"process_group\" or \"runtime\"")
        self.native = native
        self.delegated = 0      # buckets handed to the process group (native="process_group")
        self._native_rules = {}  # (elements, dtype) -> whether its rule is the lossless fp32 library call
        self.profile = as_profile(profile)
        self.process_group = process_group
        if isinstance(module, torch.nn.parallel.DistributedDataParallel):
            module = module.module  # names without DDP's "module." prefix
        self.module = module
        if device is None:
            params = list(module.parameters()) if module is not None else []
            device = params[0].device if params else torch.device("cpu")
        self.device = torch.device(device)
        self.ranks_per_node = int(ranks_per_node)
        self.entries = {}       # key -> _Entry
        self.owner = {}         # parameter name -> key of the entry holding its residual (module given)
        self.iteration = 0      # completed backward passes (buckets marked last)
        self.record = False
        self.records = []
        self.hook_seconds = 0.0  # time spent inside the hook call (queueing), summed
        self._names = None
        self._inflight = {}
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()
        self._warned = set()
        self._done = _DONE_FN(self._on_done)
        self._side = None
        self._runtime_thread = None
        self._rt = self._comm = None
        lib = _lib.lib()
        rank, size = dist.get_rank(process_group), dist.get_world_size(process_group)
        self.rank, self.size = rank, size
        if self.device.type not in ("cpu", "cuda"):
            raise UsageError(1, f"ciuic DDP hook: buckets on {self.device} are not reduced (cpu or cuda)")
        if transport not in (None, "nccl", "gloo") or (self.device.type == "cpu" and transport == "nccl"):
            raise UsageError(1, f"ciuic DDP hook: transport {transport!r} for {self.device.type} buckets (cpu: gloo; "
                                "cuda: nccl or gloo)")
        kind = "cpu" if self.device.type == "cpu" else "cuda-gloo" if transport == "gloo" else "cuda"
        self._store = _Store(_default_store(process_group))
        comm = ctypes.c_void_p()
        prefix = f"ciuic/comm{next(_comm_counter)}"
        if kind != "cpu":
            torch.cuda.set_device(self.device)
        try:
            _lib.call("ciuic_comm_create_store", rank, size, prefix.encode(), kind.encode(), self._store.set_fn,
                      self._store.get_fn, None, float(timeout), ctypes.byref(comm))
        except UsageError as e:
            raise UsageError(e.status, f"ciuic DDP hook: {kind} buckets cannot be reduced: {e}") from None
        self._comm = comm
        rt = ctypes.c_void_p()
        flags = PROPAGATE_NONFINITE | (ANY_WORLD if allow_world_mismatch else 0)
        try:
            _lib.call("ciuic_runtime_create_profile", comm, self.profile._h, flags, self.ranks_per_node,
                      ctypes.byref(rt))
        except Exception:
            lib.ciuic_comm_destroy(comm)
            self._comm = None
            raise
        try:
            if not os.environ.get("CIUIC_TIMEOUT"):
                # The runtime's deadline is the hook's timeout (the library's default, 60 s, would end a
                # job whose rank 0 writes a checkpoint for a minute while the others wait in a bucket).
                _lib.call("ciuic_runtime_set_timeout", rt, float(timeout))
        except Exception:
            lib.ciuic_runtime_destroy(rt)
            lib.ciuic_comm_destroy(comm)
            self._comm = None
            raise
        self._rt = rt
        if kind != "cpu":
            self._side = torch.cuda.Stream(device=self.device)

    # ---- bookkeeping ---------------------------------------------------------------------------
    def _warn(self, tag, message):
        if tag not in self._warned:
            self._warned.add(tag)
            warnings.warn(f"ciuic DDP hook: {message}", RuntimeWarning, stacklevel=3)

    def _identity(self, params):
        """Parameter names (module given) or shapes of a bucket's parameters, in bucket order."""
        if self.module is None:
            return [f"{tuple(p.shape)}:{p.dtype}" for p in params], False
        if self._names is None or any(p.data_ptr() not in self._names for p in params):
            self._names = {p.data_ptr(): name for name, p in self.module.named_parameters()}
        names = [self._names.get(p.data_ptr()) for p in params]
        if any(n is None for n in names):
            self._warn("names", "a bucket holds parameters that are not the module's; keyed by shapes")
            return [f"{tuple(p.shape)}:{p.dtype}" for p in params], False
        return names, True

    def _lookup(self, index, n, dtype, ident, named, sizes):
        """(entry, None) for a known or new layout, or (None, [entries]) when the bucket is made of
        whole known buckets (reduced as those were)."""
        key = f"{index}:{n}:{dtype}:{_digest(ident)}"
        entry = self.entries.get(key)
        if entry is not None:
            return entry, None
        if named and self.owner and self.iteration == 0:
            # Only in the first iteration after a load: DDP reduces one bucket of every parameter before
            # it rebuilds its buckets, and a resumed run must reduce them as the run it continues did.
            owners = {self.owner.get(name) for name in ident}
            if None not in owners:
                subs = [self.entries[k] for k in owners]
                names = set(ident)
                if all(set(e.ident) <= names for e in subs) and sum(e.n for e in subs) == n:
                    return None, sorted(subs, key=lambda e: (e.index, e.key))
        entry = _Entry(key, index, n, dtype, ident, sizes, named)
        if named:
            self._take_over(entry)
        self.entries[key] = entry
        return entry, None

    def _take_over(self, entry):
        """A new layout takes the residual of its parameters from the entries holding them (the
        runtime's residual moved from their tensor ids to the new one)."""
        carried = np.zeros(entry.n, np.float32)
        moved = False
        olds = {}  # key -> (residual, name -> offset)
        for name, off, size in zip(entry.ident, entry.offsets, entry.sizes):
            old_key = self.owner.get(name)
            if old_key is not None and old_key in self.entries:
                if old_key not in olds:
                    old = self.entries[old_key]
                    olds[old_key] = (self._residual(old), dict(zip(old.ident, old.offsets)))
                res, where = olds[old_key]
                carried[off:off + size] = res[where[name]:where[name] + size]
                moved = True
            self.owner[name] = entry.key
        holders = set(self.owner.values())
        for k in [k for k, e in self.entries.items() if e.named and k not in holders]:
            _lib.call("ciuic_runtime_forget", self._rt, self.entries[k].tid)
            del self.entries[k]
        if moved and np.any(carried):
            kept = ctypes.c_int()
            _lib.call("ciuic_runtime_set_residual", self._rt, entry.tid, entry.n, _DTYPES[entry.dtype],
                      carried.ctypes.data_as(ctypes.c_void_p), ctypes.byref(kept))
            if not kept.value:
                self._warn("carry", f"bucket {entry.key} keeps no residual under its rule: the error feedback of its "
                                    "parameters from the previous bucket layout is dropped")

    def _residual(self, entry):
        out = np.zeros(entry.n, np.float32)
        _lib.call("ciuic_runtime_residual", self._rt, entry.tid, entry.n, _DTYPES[entry.dtype],
                  out.ctypes.data_as(ctypes.c_void_p))
        return out

    def residual(self, key):
        """The runtime's error feedback of bucket layout `key` (fp32 numpy array; tests)."""
        return self._residual(self.entries[key])

    def config_of(self, n, dtype=torch.float32):
        """The runtime configuration a bucket of n elements of dtype runs ("ring int8 fp32 8192 B x1")."""
        buf = ctypes.create_string_buffer(256)
        _lib.call("ciuic_runtime_config_of", self._rt, n, _DTYPES[dtype], buf, len(buf))
        return buf.value.decode()

    def nonfinite(self):
        """Buckets that met NaN/Inf and were summed uncompressed."""
        c = ctypes.c_uint64()
        _lib.call("ciuic_runtime_nonfinite", self._rt, ctypes.byref(c))
        return c.value

    # ---- the hook ------------------------------------------------------------------------------
    def _submit(self, bucket):
        start = _now()
        buf = bucket.buffer()
        if self._rt is None:
            raise UsageError(1, "ciuic DDP hook: the state was closed")
        if buf.device.type != self.device.type:
            raise UsageError(1, f"ciuic DDP hook: bucket {bucket.index()} lives on {buf.device}, the runtime was made "
                                f"for {self.device.type} buckets (pass module= or device= to comm_hook)")
        if buf.dtype not in _DTYPES:
            raise UsageError(1, f"ciuic DDP hook: bucket {bucket.index()} holds {buf.dtype}; the runtime reduces "
                                "float32, float16 and bfloat16")
        if not buf.is_contiguous():
            raise UsageError(1, f"ciuic DDP hook: bucket {bucket.index()} is not contiguous")
        params = bucket.parameters()
        ident, named = self._identity(params)
        sizes = [p.numel() for p in params]
        entry, subs = self._lookup(bucket.index(), buf.numel(), buf.dtype, ident, named, sizes)
        last = bucket.is_last()
        if entry is not None and self.native == "process_group" and self._is_native(buf):
            # The library's own lossless allreduce: the job's process group runs it, as DDP's default hook.
            self.delegated += 1
            entry.last_used = self.iteration
            buf.div_(self.size)
            fut = dist.all_reduce(buf, group=self.process_group, async_op=True).get_future()
            self._end_bucket(last, start)
            return fut.then(lambda f: f.value()[0])
        fut = torch.futures.Future(devices=[buf.device]) if buf.device.type == "cuda" else torch.futures.Future()
        if entry is not None:
            parts = [(entry, buf, None)]
        else:
            # A bucket made of buckets the state knows (a resumed run's first iteration): each part
            # gathered in its own layout, reduced as before, scattered back when all are done.
            where = {name: off for name, off in zip(ident, np.cumsum([0] + sizes)[:-1])}
            parts = []
            for sub in subs:
                part = torch.empty(sub.n, dtype=buf.dtype, device=buf.device)
                for name, off, size in zip(sub.ident, sub.offsets, sub.sizes):
                    part[off:off + size] = buf[int(where[name]):int(where[name]) + size]
                if self._side is not None:
                    part.record_stream(self._side)  # read back on the side stream, after this stream frees it
                parts.append((sub, part, (where, sub)))
        pending = {"left": len(parts), "error": None, "buf": buf, "fut": fut, "parts": parts, "records": []}
        if self._side is not None:
            self._side.wait_stream(torch.cuda.current_stream(buf.device))
        stream = self._side.cuda_stream if self._side is not None else None
        for i, (e, tensor, _) in enumerate(parts):
            if self.record:
                pending["records"].append({"key": e.key, "tid": e.tid, "dtype": str(e.dtype), "iteration": self.iteration,
                                           "input": tensor.detach().cpu().clone()})
            token = next(self._tokens)
            with self._lock:
                self._inflight[token] = pending
            try:
                _lib.call("ciuic_allreduce_async", self._rt, ctypes.c_void_p(tensor.data_ptr()), tensor.numel(),
                          _DTYPES[tensor.dtype], e.tid, 1, ctypes.c_void_p(stream) if stream else None, self._done,
                          ctypes.c_void_p(token), None)
            except Exception as exc:
                # Not queued: this part and the ones after it will never complete; the Future fails once
                # the parts already queued have.
                with self._lock:
                    self._inflight.pop(token, None)
                    pending["error"] = pending["error"] or exc
                    pending["left"] -= len(parts) - i
                    finished = pending["left"] == 0
                if finished:
                    fut.set_exception(pending["error"])
                raise
        for e, _, _ in parts:
            e.last_used = self.iteration
        self._end_bucket(last, start)
        # Through then(): an error set on `fut` reaches DDP as an error of the Future it waits on, with
        # its own text (torch 1.13's reducer reads a Python Future's value in C++, and would report a
        # failed one as "Unable to cast <the error> to Tensor").
        return fut.then(_value_of)

    def _is_native(self, buf):
        """Whether the profile's rule for this bucket is the library's lossless fp32 allreduce (and the
        process group reduces its dtype: gloo in torch 1.13 has no bf16)."""
        key = (buf.numel(), buf.dtype)
        hit = self._native_rules.get(key)
        if hit is None:
            r = self.profile.rule_for(buf.numel() * buf.element_size())
            hit = (r.algo == "nccl" and r.codec == "none" and r.precision == "fp32" and
                   (buf.dtype == torch.float32 or buf.device.type == "cuda"))
            self._native_rules[key] = hit
        return hit

    def _end_bucket(self, last, start):
        if last:
            self.iteration += 1
            if self.module is None:
                # Without names a rebuilt layout cannot take over residuals; layouts unused for two whole
                # iterations (DDP's first-iteration bucket) are dropped, their state with them.
                for k in [k for k, e in self.entries.items() if e.last_used < self.iteration - 2]:
                    _lib.call("ciuic_runtime_forget", self._rt, self.entries.pop(k).tid)
        self.hook_seconds += _now() - start

    def _on_done(self, user, status, error):
        """Called on the runtime's thread when a part of a bucket ended."""
        self._runtime_thread = threading.get_ident()
        with self._lock:
            pending = self._inflight.pop(user)
            if status != 0 and pending["error"] is None:
                cls = {1: UsageError, 3: InputError}.get(status)
                msg = (error or b"").decode("utf-8", "replace")
                pending["error"] = cls(status, msg) if cls else RuntimeError(f"ciuic runtime: {msg}")
            pending["left"] -= 1
            if pending["left"]:
                return
        buf, fut = pending["buf"], pending["fut"]
        try:
            ctx = torch.cuda.stream(self._side) if self._side is not None else _nullcontext()
            with ctx:
                for e, tensor, scatter in pending["parts"]:
                    if scatter is not None:
                        where, sub = scatter
                        for name, off, size in zip(sub.ident, sub.offsets, sub.sizes):
                            buf[int(where[name]):int(where[name]) + size] = tensor[off:off + size]
                if self.record and pending["error"] is None:
                    for rec, (e, tensor, _) in zip(pending["records"], pending["parts"]):
                        rec["output"] = tensor.detach().cpu().clone()
                        self.records.append(rec)
                if pending["error"] is not None:
                    fut.set_exception(pending["error"])
                else:
                    fut.set_result(buf)
        except Exception as e:  # noqa: BLE001 - must reach the Future, not the runtime's thread
            if not fut.done():
                fut.set_exception(e)

    # ---- checkpoints ---------------------------------------------------------------------------
    def state_dict(self):
        """This rank's hook state as plain Python values and bytes (torch.save it with the model). Waits
        for the reductions queued so far."""
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "state")
            _lib.call("ciuic_runtime_save", self._rt, path.encode())
            with open(path, "rb") as f:
                runtime = f.read()
        buckets = {key: {"index": e.index, "n": e.n, "dtype": str(e.dtype).replace("torch.", ""), "ident": e.ident,
                         "sizes": e.sizes, "named": e.named} for key, e in self.entries.items()}
        return {"format": STATE_FORMAT, "world_size": self.size, "rank": self.rank, "iteration": self.iteration,
                "buckets": buckets, "runtime": runtime}

    def load_state_dict(self, d):
        """Replaces the state with one state_dict() wrote on this rank of a job of the same size and
        profile. Collective (the runtime's load is agreed by every rank). Bad or foreign state raises
        InputError (a ValueError) and leaves the state as it was."""
        if not isinstance(d, dict) or d.get("format") != STATE_FORMAT:
            raise InputError(3, f"not a ciuic DDP hook state ({STATE_FORMAT})")
        entries, owner = {}, {}
        try:
            for key, b in d["buckets"].items():
                dtype = getattr(torch, b["dtype"])
                if dtype not in _DTYPES:
                    raise InputError(3, f"bucket {key}: dtype {b['dtype']}")
                named = bool(b.get("named")) and self.module is not None
                e = _Entry(key, b["index"], b["n"], dtype, b["ident"], b["sizes"], named)
                entries[key] = e
                if named:
                    for name in e.ident:
                        if name in owner:
                            raise InputError(3, f"parameter {name} is held by buckets {owner[name]} and {key}")
                        owner[name] = key
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            if isinstance(e, InputError):
                raise
            raise InputError(3, f"the hook state is malformed: {e!r}") from None
        # The runtime checks world size, rank, profile and every length itself, on every rank together.
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "state")
            with open(path, "wb") as f:
                f.write(d.get("runtime") or b"")
            _lib.call("ciuic_runtime_load", self._rt, path.encode())
        if self.module is None and any(b.get("named") for b in d["buckets"].values()):
            self._warn("names", "the state was saved with parameter names; pass module= to comm_hook to use them")
        self.entries, self.owner = entries, owner
        self.iteration = 0

    def close(self):
        """Ends the runtime (after its queued work) and the communicator; the hook must not run after this."""
        lib = _lib.lib()
        if self._rt is not None:
            lib.ciuic_runtime_destroy(self._rt)
            self._rt = None
        if self._comm is not None:
            lib.ciuic_comm_destroy(self._comm)
            self._comm = None

    def __del__(self):
        if getattr(self, "_rt", None) is None and getattr(self, "_comm", None) is None:
            return
        try:
            if threading.get_ident() == getattr(self, "_runtime_thread", None):
                # Collected inside a completion, on the runtime's own thread, which cannot wait for itself.
                threading.Thread(target=self.close, daemon=True).start()
            else:
                self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class Accumulation:
    """Opt-in gradient accumulation: gradients are synchronised every `steps` micro-batches (DDP's
    no_sync on the others), so a job pays one allreduce per `steps` micro-batches. It changes the
    effective batch `steps`-fold, a training hyperparameter: the profile only suggests it (`ciuic-tune
    --accumulation`, the exports' suggestion), and nothing applies it unless the job builds this.

        acc = ciuic.torch.Accumulation(ddp, 4)            # or Accumulation(ddp, "profile", profile=P)
        for i, (x, y) in enumerate(loader):
            with acc.micro_batch(i):
                (loss_fn(ddp(x), y) / acc.steps).backward()
            if acc.sync_step(i):
                opt.step()
                opt.zero_grad()

    steps: a whole number >= 1, or "profile": the profile's suggestion (1 when it has none).
    """

    def __init__(self, ddp, steps, profile=None):
        if not hasattr(ddp, "no_sync"):
            raise UsageError(1, "Accumulation: the model must be a DistributedDataParallel (it needs no_sync)")
        if steps == "profile":
            if profile is None:
                raise UsageError(1, 'Accumulation: steps="profile" needs profile=')
            adv = as_profile(profile).accumulation
            steps = adv.suggested_steps if adv is not None else 1
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise UsageError(1, f"Accumulation: steps must be a whole number >= 1 or \"profile\", not {steps!r}")
        self.ddp, self.steps = ddp, steps

    def sync_step(self, micro_index):
        """Whether micro-batch `micro_index` (0-based) ends an accumulation: its backward synchronises
        the gradients, and the optimizer steps after it."""
        if micro_index < 0:
            raise UsageError(1, f"Accumulation: micro-batch index {micro_index} is negative")
        return (micro_index + 1) % self.steps == 0

    def micro_batch(self, micro_index):
        """The context to run micro-batch `micro_index`'s forward and backward in: DDP's no_sync unless
        it ends an accumulation."""
        return _nullcontext() if self.sync_step(micro_index) else self.ddp.no_sync()


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _value_of(fut):
    """The value of a completed Future: its result, or its error raised."""
    return fut.value()


def _now():
    return time.perf_counter()
