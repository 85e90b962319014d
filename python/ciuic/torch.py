"""PyTorch DDP with ciuic codecs: a communication hook that applies a tuned profile per bucket.

    import ciuic.torch
    ddp = DistributedDataParallel(model, **ciuic.torch.ddp_kwargs("my.profile.json"))
    state, hook = ciuic.torch.comm_hook("my.profile.json", module=model)
    ddp.register_comm_hook(state, hook)
    ...
    torch.save({"model": ..., "optimizer": ..., "ciuic": state.state_dict()}, f"ckpt.{rank}.pt")
    state.load_state_dict(torch.load(f"ckpt.{rank}.pt")["ciuic"])

For each DDP bucket the hook looks up the profile's rule for the bucket's byte size (libciuic's own
profile reader), cuts the bucket into the rule's bucket_bytes pieces as the runtime does, and reduces
each piece with the rule's codec and algorithm, written over the job's process group (gloo on CPU):

  codec none          the process group's allreduce of bucket / P (DDP's default hook, bit for bit);
                      precision fp16: cast after the 1/P scaling, fp16 allreduce, cast back; bf16
                      (gloo has no bf16 sum): the casts all-gathered and added in rank order in bf16
  ring   (fp16 bf16 fp8 int8 int4 sign1)
                      the runtime's compressed ring: the rank's contribution quantised once with its
                      error feedback, a ring reduce-scatter of encoded chunks over send/recv in which
                      each hop decodes, adds its own chunk in fp32 and re-encodes in one fused call,
                      then an all-gather of the owners' encoded chunks that every rank decodes
  sign2  (sign1)      two-phase: every rank encodes chunk i with its residual and all_to_all_single
                      sends it to rank i (gloo has no reduce_scatter); the server decodes the P wires
                      in rank order, sums in fp32, re-encodes with its own (server) error feedback; the
                      server wires are all-gathered and decoded by every rank
  hier                the contribution quantised with error feedback; one node: an fp32 allreduce;
                      several: fp32 allreduce inside the node, the compressed ring across nodes on the
                      chunk this rank owns, all-gather inside the node
  sparse (topk)       each rank's (values, indices) all-gathered and decoded in rank order
  randomk             shared indices: the k values allreduced (sum), decoded with the shared indices
  powersgd, others    each rank's encoded tensor all-gathered, decoded and summed in rank order
                      (every codec can take this path; PowerSGD's two-allreduce form is the runtime's)

Every rank decodes the same bytes in the same order, so every rank ends with the same bits; the sum
is scaled by 1/P. NaN/Inf in a gradient reaches every rank as NaN, as with DDP's default hook (so a
GradScaler sees it), and is never folded into error feedback: element codecs send the affected blocks
with a NaN scale and keep those blocks' residual; topk, randomk and powersgd first agree over the
group (one small allreduce) and reduce such a bucket uncompressed, their state untouched. The hook
reduces CPU buckets (gloo); a bucket on a GPU is refused with an error.

With transport="mpi" (or "auto" under mpiexec) and a libciuic built with MPI, buckets go through the
ciuic runtime itself (ciuic_mpi_world + ciuic_runtime_create + ciuic_allreduce) instead.

The state is per rank and per bucket: a residual (and the server's for sign2) per piece, kept across
steps. Buckets are keyed by their index, size and parameters (names when `module` is given, shapes
otherwise), so DDP's bucket rebuild after the first iteration makes new keys instead of applying a
residual to other parameters. With `module`, error feedback follows the parameters: a rebuilt bucket
takes over the residual of its parameters, and a bucket made of whole buckets the state already knows
(a resumed run's first iteration, which DDP reduces as one bucket of every parameter) is reduced as
those buckets were, so a resumed run continues bit for bit.
"""
import ctypes
import hashlib
import os
import socket
import tempfile
import warnings

import numpy as np
import torch
import torch.distributed as dist

from ciuic import _lib
from ciuic.codec import Codec, CodecState
from ciuic.errors import InputError
from ciuic.profile import as_profile

STATE_FORMAT = "ciuic.ddp_hook/1"
TRANSPORTS = ("process_group", "mpi", "auto")


def ddp_kwargs(profile):
    """Keyword arguments for DistributedDataParallel from a profile: bucket_cap_mb is the bucket size of
    the profile's largest band (its last rule, as `ciuic-tune export --format ddp`), in MiB, fractional
    when it is not a whole MiB."""
    p = as_profile(profile)
    big = p.rules[-1]
    mb = big.bucket_bytes / float(1 << 20)
    return {"bucket_cap_mb": int(mb) if mb == int(mb) else mb}


def comm_hook(profile, process_group=None, module=None, transport="process_group", ranks_per_node=0):
    """(state, hook) for DistributedDataParallel.register_comm_hook(state, hook).

    profile: a profile path, JSON text, dict or ciuic.Profile. process_group: the DDP's group (None:
    the default group). module: the model (or the DDP wrapping it): keys the state by parameter names,
    so error feedback follows parameters across DDP's bucket rebuild and resumes bit for bit.
    transport: "process_group" (the default), "mpi" (the ciuic runtime over MPI; needs mpiexec and an
    MPI-enabled libciuic) or "auto" (mpi when launched by mpiexec and available). ranks_per_node: the
    hier algorithm's node size (0: ranks grouped by host name).
    """
    state = HookState(profile, process_group=process_group, module=module, transport=transport,
                      ranks_per_node=ranks_per_node)
    return state, hook


def finalize():
    """Finalises MPI if the ciuic runtime initialised it (transport "mpi"); call after the last step."""
    _lib.call("ciuic_mpi_finalize")


def hook(state, bucket):
    """The DDP communication hook: state is the HookState from comm_hook."""
    return state._reduce_bucket(bucket)


def _digest(parts):
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


def _plan(rule, codec):
    """Which of this module's algorithms a rule's (algo, codec) runs as."""
    if codec.lossless:
        return {"fp16": "allreduce_fp16", "bf16": "allreduce_bf16"}.get(rule.precision, "allreduce")
    if codec.kind == "topk":
        return "sparse"
    if codec.kind == "randomk":
        return "randomk"
    if codec.kind == "sign1" and rule.algo == "sign2":
        return "sign2"
    if codec.has_decode_add_encode:
        return "hier" if rule.algo == "hier" else "ring"
    return "allgather"  # powersgd (and any codec the algorithms above do not take)


class _Piece:
    """rule.bucket_bytes of a bucket (the runtime's bucketing) with its codec states."""

    def __init__(self, begin, end):
        self.begin, self.end = begin, end
        self.worker = None  # CodecState of end - begin elements (codecs with state)
        self.server = None  # sign2: the server's CodecState for the chunk this rank owns


class _Entry:
    """One DDP bucket layout: its rule, plan and pieces."""

    def __init__(self, key, index, n, ident, sizes, named, rule, codec, plan, piece_elems):
        self.key, self.index, self.n, self.named = key, index, n, named
        self.ident, self.sizes = list(ident), list(sizes)
        self.offsets = list(np.cumsum([0] + list(sizes))[:-1]) if sizes else []
        self.rule, self.codec, self.plan = rule, codec, plan
        self.pieces = []
        step = max(1, piece_elems)
        for b in range(0, max(n, 1), step):
            self.pieces.append(_Piece(b, min(n, b + step)))
        self.last_used = 0

    def residual(self):
        """The bucket's residual (concatenated pieces), or None when no piece keeps one."""
        if not any(p.worker is not None for p in self.pieces):
            return None
        out = np.zeros(self.n, np.float32)
        for p in self.pieces:
            if p.worker is not None:
                out[p.begin:p.end] = p.worker.residual()
        return out


class HookState:
    """Per-rank state of the ciuic DDP hook (see the module docstring). state_dict()/load_state_dict()
    carry it in a checkpoint; `record = True` keeps, per reduced piece, the gradient, residuals,
    this rank's decoded contribution and the result in `records` (for tests)."""

    def __init__(self, profile, process_group=None, module=None, transport="process_group", ranks_per_node=0):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport {transport!r}: one of {', '.join(TRANSPORTS)}")
        self.profile = as_profile(profile)
        self.process_group = process_group
        if isinstance(module, torch.nn.parallel.DistributedDataParallel):
            module = module.module  # names without DDP's "module." prefix
        self.module = module
        self.transport = transport
        self.ranks_per_node = int(ranks_per_node)
        self.entries = {}       # key -> _Entry
        self.owner = {}         # parameter name -> key of the entry holding its residual (module given)
        self.codecs = {}        # codec name -> Codec
        self.iteration = 0      # completed backward passes (buckets marked last)
        self.nonfinite = 0      # reductions that met NaN/Inf (sent as NaN, or uncompressed after the agreement)
        self.record = False
        self.records = []
        self._names = None      # data_ptr -> parameter name
        self._world = None      # (rank, size, global ranks of the group)
        self._hier_groups = None  # ((intra ranks, group), (inter ranks, group)) for hier across nodes
        self._mpi = None        # _MpiRuntime when the transport is the ciuic runtime
        self._pending_runtime_state = None
        self._warned = set()

    # ---- bookkeeping ---------------------------------------------------------------------------
    def _warn(self, tag, message):
        if tag not in self._warned:
            self._warned.add(tag)
            warnings.warn(f"ciuic DDP hook: {message}", RuntimeWarning, stacklevel=3)

    def _group(self):
        if self._world is None:
            pg = self.process_group
            rank, size = dist.get_rank(pg), dist.get_world_size(pg)
            if pg is None or pg == dist.group.WORLD:
                ranks = list(range(size))
            else:
                ranks = [dist.get_global_rank(pg, i) for i in range(size)]
            self._world = (rank, size, ranks)
        return self._world

    def _codec(self, name):
        if name not in self.codecs:
            self.codecs[name] = Codec(name)
        return self.codecs[name]

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

    def _new_entry(self, key, index, n, ident, sizes, named):
        rule = self.profile.rule_for(n * 4)
        codec = self._codec(rule.codec)
        plan = _plan(rule, codec)
        piece = n if plan.startswith("allreduce") else max(1, rule.bucket_bytes // 4)
        return _Entry(key, index, n, ident, sizes, named, rule, codec, plan, piece)

    def _lookup(self, index, n, ident, named, sizes):
        """(entry, None) for a known or new layout, or (None, [entries]) when the bucket is made of
        whole known buckets (reduced as those were)."""
        key = f"{index}:{n}:{_digest(ident)}"
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
        entry = self._new_entry(key, index, n, ident, sizes, named)
        if named:
            self._take_over(entry)
        self.entries[key] = entry
        return entry, None

    def _take_over(self, entry):
        """A new layout takes the residual of its parameters from the entries holding them."""
        carried = np.zeros(entry.n, np.float32)
        moved = False
        olds = {}  # key -> (residual or None, name -> offset)
        for name, off, size in zip(entry.ident, entry.offsets, entry.sizes):
            old_key = self.owner.get(name)
            if old_key is not None and old_key in self.entries:
                if old_key not in olds:
                    old = self.entries[old_key]
                    olds[old_key] = (old.residual(), dict(zip(old.ident, old.offsets)))
                res, where = olds[old_key]
                if res is not None:
                    carried[off:off + size] = res[where[name]:where[name] + size]
                    moved = True
            self.owner[name] = entry.key
        holders = set(self.owner.values())
        for k in [k for k, e in self.entries.items() if e.named and k not in holders]:
            del self.entries[k]
        if moved and np.any(carried):
            if self._keeps_residual(entry):
                self._ensure_states(entry)
                for p in entry.pieces:
                    p.worker.set_residual(carried[p.begin:p.end])
            else:
                self._warn("carry", f"bucket {entry.key} ({entry.codec.name}) keeps no residual: the error "
                                    "feedback of its parameters from the previous bucket layout is dropped")

    @staticmethod
    def _keeps_residual(entry):
        return not entry.codec.lossless and not entry.plan.startswith("allreduce")

    def _ensure_states(self, entry):
        for p in entry.pieces:
            if p.worker is None and entry.codec.stateful:
                p.worker = CodecState(entry.codec, p.end - p.begin)

    # ---- the hook ------------------------------------------------------------------------------
    def _reduce_bucket(self, bucket):
        buf = bucket.buffer()
        if buf.device.type != "cpu":
            raise RuntimeError(f"ciuic DDP hook: bucket {bucket.index()} lives on {buf.device}; the hook reduces "
                               "CPU buckets (gloo) only")
        params = bucket.parameters()
        ident, named = self._identity(params)
        sizes = [p.numel() for p in params]
        n = buf.numel()
        entry, subs = self._lookup(bucket.index(), n, ident, named, sizes)
        last = bucket.is_last()
        mpi = self._runtime()
        if entry is not None and entry.plan == "allreduce" and mpi is None and buf.dtype == torch.float32:
            # DDP's default hook exactly: overlap with the rest of the backward pass.
            entry.last_used = self.iteration
            self._end_bucket(last)
            _, size, _ = self._group()
            buf.div_(size)
            work = dist.all_reduce(buf, group=self.process_group, async_op=True)
            return work.get_future().then(lambda f: f.value()[0])
        x32 = buf if buf.dtype == torch.float32 else buf.to(torch.float32)
        x = x32.detach().numpy()
        if entry is not None:
            self._reduce_entry(entry, x, mpi)
        else:
            # A bucket made of buckets the state knows (a resumed run's first iteration): each part
            # gathered in its own layout, reduced as before, scattered back.
            where = {name: (off, size) for name, off, size in zip(ident, np.cumsum([0] + sizes)[:-1], sizes)}
            for sub in subs:
                part = np.empty(sub.n, np.float32)
                for name, off, size in zip(sub.ident, sub.offsets, sub.sizes):
                    src = where[name][0]
                    part[off:off + size] = x[src:src + size]
                self._reduce_entry(sub, part, mpi)
                for name, off, size in zip(sub.ident, sub.offsets, sub.sizes):
                    dst = where[name][0]
                    x[dst:dst + size] = part[off:off + size]
        if x32 is not buf:
            buf.copy_(x32)
        self._end_bucket(last)
        fut = torch.futures.Future()
        fut.set_result(buf)
        return fut

    def _end_bucket(self, last):
        if not last:
            return
        self.iteration += 1
        if self.module is None:
            # Without names a rebuilt layout cannot take over residuals; layouts unused for two
            # whole iterations (DDP's first-iteration bucket) are dropped.
            for k in [k for k, e in self.entries.items() if e.last_used < self.iteration - 2]:
                del self.entries[k]

    def _reduce_entry(self, entry, x, mpi):
        entry.last_used = self.iteration
        if mpi is not None:
            mpi.allreduce(entry, x)
            return
        self._ensure_states(entry)
        rank, size, ranks = self._group()
        for p in entry.pieces:
            piece = x[p.begin:p.end]
            rec = self._record_start(entry, p, piece) if self.record else None
            if not getattr(self, "_" + entry.plan)(entry, p, piece, rank, size, ranks, rec):
                piece *= np.float32(1) / np.float32(size)  # as the runtime: one scaling by 1/P after the sum
            if rec is not None:
                rec["result"] = piece.copy()
                if p.worker is not None:
                    rec["residual_after"] = p.worker.residual()
                if p.server is not None:
                    rec["server_after"] = p.server.residual()
                self.records.append(rec)

    def _record_start(self, entry, p, piece):
        rec = {"key": entry.key, "piece": p.begin, "n": piece.size, "codec": entry.codec.name, "plan": entry.plan,
               "iteration": self.iteration, "grad": piece.copy()}
        if p.worker is not None:
            rec["residual_before"] = p.worker.residual()
        if p.server is not None:
            rec["server_before"] = p.server.residual()
        return rec

    # ---- transport helpers ---------------------------------------------------------------------
    def _all_gather_bytes(self, wire, length, size, group=None):
        t = torch.zeros(length, dtype=torch.uint8)
        if wire.size:
            t[:wire.size] = torch.from_numpy(wire)
        out = [torch.empty(length, dtype=torch.uint8) for _ in range(size)]
        dist.all_gather(out, t, group=self.process_group if group is None else group)
        return [o.numpy() for o in out]

    def _finite_everywhere(self, x):
        bad = torch.tensor([0 if np.isfinite(x).all() else 1], dtype=torch.int32)
        dist.all_reduce(bad, op=dist.ReduceOp.MAX, group=self.process_group)
        if bad.item():
            self.nonfinite += 1
            self._warn("nonfinite", "a gradient holds NaN or Inf on some rank: such buckets are reduced "
                                    "uncompressed and the codec state is left as it was")
        return bad.item() == 0

    def _plain_sum(self, x):
        t = torch.from_numpy(x)
        dist.all_reduce(t, group=self.process_group)

    def _encode_or_flag(self, fn, *args, out):
        # NaN/Inf in a block: the wire is written with a NaN scale (decoding to NaN on every rank, as
        # an uncompressed sum would), the block's residual kept; the exchange goes on so no rank waits.
        try:
            fn(*args, out=out)
        except InputError:
            self.nonfinite += 1
            self._warn("nonfinite", "a gradient holds NaN or Inf: its blocks reach every rank as NaN")

    # ---- algorithms: the sum into x; True when x is already the mean (else the caller scales by 1/P) ----
    def _allreduce(self, entry, p, x, rank, size, ranks, rec):
        x /= np.float32(size)  # DDP's default hook: divide, then sum
        self._plain_sum(x)
        return True

    def _allreduce_fp16(self, entry, p, x, rank, size, ranks, rec):
        # As the runtime's native fp16: scaled by 1/P before the cast so the sum cannot overflow.
        t = (torch.from_numpy(x) * (np.float32(1) / np.float32(size))).to(torch.float16)
        dist.all_reduce(t, group=self.process_group)
        x[:] = t.to(torch.float32).numpy()
        return True

    def _allreduce_bf16(self, entry, p, x, rank, size, ranks, rec):
        mine = (torch.from_numpy(x) * (np.float32(1) / np.float32(size))).to(torch.bfloat16)
        gathered = [torch.empty_like(mine) for _ in range(size)]
        # gloo moves no bf16: the bytes travel as uint8.
        dist.all_gather([g.view(torch.uint8) for g in gathered], mine.view(torch.uint8), group=self.process_group)
        acc = gathered[0]
        for g in gathered[1:]:
            acc = acc + g  # bf16 + bf16: each partial sum rounded to bf16, in rank order
        x[:] = acc.to(torch.float32).numpy()
        return True

    def _quantise_contribution(self, codec, p, x, rec):
        if p.worker is None:
            return
        wire = np.empty(codec.wire_bytes(x.size), np.uint8)
        step = p.worker.step
        self._encode_or_flag(codec.encode, x, p.worker, out=wire)
        codec.decode(wire, x.size, step, out=x)  # this rank's contribution: what the others will add
        if rec is not None:
            rec["contribution"] = x.copy()

    def _ring(self, entry, p, x, rank, size, ranks, rec, group=None, quantise=True):
        codec = entry.codec
        if quantise:
            self._quantise_contribution(codec, p, x, rec)
        if size == 1:
            return
        pg = self.process_group if group is None else group
        chunks = codec.chunks(x.size, size)
        sz = [codec.wire_bytes(e - b) for b, e in chunks]
        b, e = chunks[rank]
        send = np.empty(sz[rank], np.uint8)
        self._encode_or_flag(codec.encode, x[b:e], None, out=send)
        own = None
        for s in range(size - 1):
            sc, rc = (rank - s) % size, (rank - s - 1) % size
            recv = np.empty(sz[rc], np.uint8)
            reqs = []
            if sz[sc]:
                reqs.append(dist.isend(torch.from_numpy(send[:sz[sc]]), ranks[(rank + 1) % size], group=pg))
            if sz[rc]:
                reqs.append(dist.irecv(torch.from_numpy(recv), ranks[(rank - 1) % size], group=pg))
            for q in reqs:
                q.wait()
            b, e = chunks[rc]
            out = np.empty(sz[rc], np.uint8)
            if e > b:
                self._encode_or_flag(codec.decode_add_encode, recv, x[b:e], out=out)
            if s == size - 2:
                own = out
            else:
                send = out
        # Rank r owns chunk r + 1; every rank decodes every owner's wire.
        gathered = self._all_gather_bytes(own, max(sz), size, pg)
        for q in range(size):
            c = (q + 1) % size
            b, e = chunks[c]
            if e > b:
                codec.decode(gathered[q][:sz[c]], e - b, out=x[b:e])

    def _sign2(self, entry, p, x, rank, size, ranks, rec):
        codec = entry.codec
        chunks = codec.chunks(x.size, size)
        sz = [codec.wire_bytes(e - b) for b, e in chunks]
        mb, me = chunks[rank]
        if p.server is None:
            p.server = CodecState(codec, me - mb)
            if rec is not None:
                rec["server_before"] = p.server.residual()
        wire = np.empty(sum(sz), np.uint8)
        step = p.worker.step
        self._encode_or_flag(codec.encode_chunks, x, size, p.worker, out=wire)
        offs = np.cumsum([0] + sz)
        if rec is not None:
            contribution = np.empty_like(x)
            for i, (b, e) in enumerate(chunks):
                codec.decode(wire[offs[i]:offs[i + 1]], e - b, step, out=contribution[b:e])
            rec["contribution"] = contribution
        # Phase 1: chunk i's wire to rank i.
        received = torch.empty(sz[rank] * size, dtype=torch.uint8)
        dist.all_to_all_single(received, torch.from_numpy(wire), output_split_sizes=[sz[rank]] * size,
                               input_split_sizes=sz, group=self.process_group)
        got = received.numpy()
        # Server: the P wires of its chunk decoded in rank order, summed in fp32, re-encoded with its residual.
        acc = np.empty(me - mb, np.float32)
        if me > mb:
            codec.decode(got[:sz[rank]], me - mb, step, out=acc)
            for i in range(1, size):
                codec.decode_accumulate(got[i * sz[rank]:(i + 1) * sz[rank]], acc, step)
        if rec is not None:
            rec["server_sum"] = acc.copy()
        swire = np.empty(sz[rank], np.uint8)
        sstep = p.server.step
        self._encode_or_flag(codec.encode, acc, p.server, out=swire)
        if rec is not None:
            rec["server_decoded"] = codec.decode(swire, me - mb, sstep)
        # Phase 2: the server wires to everyone.
        gathered = self._all_gather_bytes(swire, max(sz), size)
        for q, (b, e) in enumerate(chunks):
            if e > b:
                codec.decode(gathered[q][:sz[q]], e - b, out=x[b:e])

    def _gathered_sum(self, entry, p, x, rank, size, ranks, rec, wire, step):
        gathered = self._all_gather_bytes(wire, wire.size, size)
        codec = entry.codec
        if rec is not None:
            rec["contribution"] = codec.decode(wire, x.size, step)
        codec.decode(gathered[0], x.size, step, out=x)
        for g in gathered[1:]:
            codec.decode_accumulate(g, x, step)

    def _sparse(self, entry, p, x, rank, size, ranks, rec):
        if not self._finite_everywhere(x):
            return self._plain_sum(x)
        wire = np.empty(entry.codec.wire_bytes(x.size), np.uint8)
        step = p.worker.step if p.worker is not None else 0
        self._encode_or_flag(entry.codec.encode, x, p.worker, out=wire)
        self._gathered_sum(entry, p, x, rank, size, ranks, rec, wire, step)

    _allgather = _sparse  # any codec: each rank's wire gathered, decoded and summed in rank order

    def _randomk(self, entry, p, x, rank, size, ranks, rec):
        if not self._finite_everywhere(x):
            return self._plain_sum(x)
        codec = entry.codec
        wire = np.empty(codec.wire_bytes(x.size), np.uint8)  # k fp32 values; indices follow from (seed, step)
        step = p.worker.step
        self._encode_or_flag(codec.encode, x, p.worker, out=wire)
        if rec is not None:
            rec["contribution"] = codec.decode(wire, x.size, step)
        values = torch.from_numpy(wire.view(np.float32))
        dist.all_reduce(values, group=self.process_group)
        codec.decode(wire, x.size, step, out=x)

    def _hier(self, entry, p, x, rank, size, ranks, rec):
        codec = entry.codec
        self._quantise_contribution(codec, p, x, rec)
        intra, inter = self._hierarchy(size, ranks)
        if intra is None:  # one node: the intra-node reduce-scatter and all-gather are the whole sum
            return self._plain_sum(x)
        intra_ranks, intra_group = intra
        inter_ranks, inter_group = inter
        me = ranks[rank]
        lp, lr = len(intra_ranks), intra_ranks.index(me)
        t = torch.from_numpy(x)
        dist.all_reduce(t, group=intra_group)
        chunks = codec.chunks(x.size, lp)
        b, e = chunks[(lr + 1) % lp]
        if len(inter_ranks) > 1 and e > b:
            self._ring(entry, p, x[b:e], inter_ranks.index(me), len(inter_ranks), inter_ranks, None,
                       group=inter_group, quantise=False)
        longest = max(e1 - b1 for b1, e1 in chunks)
        mine = torch.zeros(longest, dtype=torch.float32)
        mine[:e - b] = torch.from_numpy(x[b:e])
        out = [torch.empty(longest, dtype=torch.float32) for _ in range(lp)]
        dist.all_gather(out, mine, group=intra_group)
        for q in range(lp):
            c = (q + 1) % lp
            cb, ce = chunks[c]
            x[cb:ce] = out[q][:ce - cb].numpy()

    def _hierarchy(self, size, ranks):
        """((intra ranks, group), (inter ranks, group)) across nodes, or (None, None) on one node."""
        if self._hier_groups is None:
            if self.ranks_per_node > 0:
                node = [r // self.ranks_per_node for r in range(size)]
            else:
                hosts = [None] * size
                dist.all_gather_object(hosts, socket.gethostname(), group=self.process_group)
                uniq = list(dict.fromkeys(hosts))
                node = [uniq.index(h) for h in hosts]
            nodes = sorted(set(node))
            per = [[ranks[r] for r in range(size) if node[r] == k] for k in nodes]
            if len(nodes) == 1:
                self._hier_groups = (None, None)
            elif len({len(g) for g in per}) != 1 or (self.process_group not in (None, dist.group.WORLD)):
                self._warn("hier", "hier needs equal nodes in the default group: reduced as one node")
                self._hier_groups = (None, None)
            else:
                me = ranks[dist.get_rank(self.process_group)]
                intra = inter = None
                for g in per:  # new_group is collective: every rank makes every group, in one order
                    grp = dist.new_group(g)
                    if me in g:
                        intra = (g, grp)
                for i in range(len(per[0])):
                    g = [grp_ranks[i] for grp_ranks in per]
                    grp = dist.new_group(g)
                    if me in g:
                        inter = (g, grp)
                self._hier_groups = (intra, inter)
        return self._hier_groups

    # ---- the ciuic runtime over MPI --------------------------------------------------------------
    def _runtime(self):
        if self.transport == "process_group":
            return None
        if self._mpi is None:
            under_mpiexec = any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))
            if self.transport == "auto" and not under_mpiexec:
                self.transport = "process_group"
                return None
            try:
                self._mpi = _MpiRuntime(self)
            except Exception as e:  # noqa: BLE001 - "auto" falls back, "mpi" reports
                if self.transport == "mpi":
                    raise
                self._warn("mpi", f"the ciuic runtime over MPI is unavailable ({e}); using the process group")
                self.transport = "process_group"
                return None
            if self._pending_runtime_state is not None:
                self._mpi.load(self._pending_runtime_state)
                self._pending_runtime_state = None
        return self._mpi

    def close(self):
        """Frees the ciuic runtimes of transport "mpi" (the hook must not run after this)."""
        if self._mpi is not None:
            self._mpi.close()
            self._mpi = None

    # ---- checkpoints -------------------------------------------------------------------------------
    def state_dict(self):
        """This rank's hook state as plain Python values and bytes (torch.save it with the model)."""
        rank, size, _ = self._group()
        buckets = {}
        for key, e in self.entries.items():
            buckets[key] = {
                "index": e.index, "n": e.n, "ident": list(e.ident), "sizes": list(e.sizes),
                "named": e.named,
                "codec": e.codec.name, "plan": e.plan, "last_used": e.last_used,
                "pieces": [{"begin": p.begin, "end": p.end,
                            "worker": p.worker.to_bytes() if p.worker is not None else None,
                            "server": p.server.to_bytes() if p.server is not None else None} for p in e.pieces],
            }
        out = {"format": STATE_FORMAT, "world_size": size, "rank": rank, "iteration": self.iteration,
               "nonfinite": self.nonfinite, "buckets": buckets, "runtime": None}
        if self._mpi is not None:
            out["runtime"] = self._mpi.save()
        return out

    def load_state_dict(self, d):
        """Replaces the state with one state_dict() wrote on this rank of a job of the same size. Bad or
        foreign state raises InputError (ValueError) and leaves the state as it was."""
        if not isinstance(d, dict) or d.get("format") != STATE_FORMAT:
            raise InputError(3, f"not a ciuic DDP hook state ({STATE_FORMAT})")
        rank, size, _ = self._group()
        if d["world_size"] != size:
            raise InputError(3, f"the hook state was saved by {d['world_size']} ranks; the job has {size}: "
                                "error feedback cannot be carried across world sizes")
        if d["rank"] != rank:
            raise InputError(3, f"the hook state belongs to rank {d['rank']}, not rank {rank}")
        entries, owner = {}, {}
        for key, b in d["buckets"].items():
            named = bool(b.get("named")) and self.module is not None
            e = self._new_entry(key, b["index"], b["n"], b["ident"], b["sizes"], named)
            if e.codec.name != b["codec"] or e.plan != b["plan"]:
                raise InputError(3, f"bucket {key}: saved for codec {b['codec']} ({b['plan']}); the profile now "
                                    f"gives {e.codec.name} ({e.plan})")
            if [(p.begin, p.end) for p in e.pieces] != [(p["begin"], p["end"]) for p in b["pieces"]]:
                raise InputError(3, f"bucket {key}: saved in other pieces than the profile's bucket_bytes cut")
            for p, saved in zip(e.pieces, b["pieces"]):
                if saved["worker"] is not None:
                    p.worker = CodecState.from_bytes(e.codec, p.end - p.begin, saved["worker"])
                if saved["server"] is not None:
                    b0, e0 = e.codec.chunk(p.end - p.begin, size, rank)
                    p.server = CodecState.from_bytes(e.codec, e0 - b0, saved["server"])
            e.last_used = 0
            entries[key] = e
            if named:
                for name in e.ident:
                    if name in owner:
                        raise InputError(3, f"parameter {name} is held by buckets {owner[name]} and {key}")
                    owner[name] = key
        if self.module is None and any(b.get("named") for b in d["buckets"].values()):
            self._warn("names", "the state was saved with parameter names; pass module= to comm_hook to use them")
        self.entries, self.owner = entries, owner
        self.iteration = 0
        self.nonfinite = d.get("nonfinite", 0)
        if d.get("runtime") is not None:
            if self._mpi is not None:
                self._mpi.load(d["runtime"])
            else:
                self._pending_runtime_state = d["runtime"]


class _MpiRuntime:
    """The ciuic runtime over MPI_COMM_WORLD: one runtime per (algorithm, codec, bucket bytes)."""

    def __init__(self, state):
        lib = _lib.lib()
        provided = ctypes.c_int()
        _lib.call("ciuic_mpi_init", ctypes.byref(provided))
        comm = ctypes.c_void_p()
        _lib.call("ciuic_mpi_world", ctypes.byref(comm))
        self.comm = comm
        rank, size, ranks = state._group()
        if lib.ciuic_comm_size(comm) != size or lib.ciuic_comm_rank(comm) != ranks[rank]:
            raise RuntimeError(f"MPI_COMM_WORLD (rank {lib.ciuic_comm_rank(comm)} of {lib.ciuic_comm_size(comm)}) "
                               f"is not the process group (rank {rank} of {size})")
        self.runtimes = {}

    @staticmethod
    def _config(rule):
        if rule.algo == "nccl":
            algo = "native" if rule.precision == "fp32" else f"native:{rule.precision}"
            return algo, rule.codec, rule.bucket_bytes  # the library's allreduce in the rule's buckets
        return rule.algo, rule.codec, rule.bucket_bytes

    def _get(self, cfg):
        rt = self.runtimes.get(cfg)
        if rt is None:
            rt = ctypes.c_void_p()
            _lib.call("ciuic_runtime_create", self.comm, cfg[0].encode(), cfg[1].encode(), cfg[2],
                      ctypes.byref(rt))
            self.runtimes[cfg] = rt
        return rt

    def allreduce(self, entry, x):
        cfg = self._config(entry.rule)
        if cfg[2] == 0:
            cfg = (cfg[0], cfg[1], max(4, x.size * 4))  # a rule without a bucket: the whole message at once
        tensor_id = int(entry.key.split(":")[2], 16) & ((1 << 63) - 1)
        _lib.call("ciuic_allreduce", self._get(cfg), x.ctypes.data_as(ctypes.c_void_p), x.size, tensor_id, 1)

    def close(self):
        lib = _lib.lib()
        for rt in self.runtimes.values():
            lib.ciuic_runtime_destroy(rt)
        self.runtimes = {}
        if self.comm:
            lib.ciuic_comm_destroy(self.comm)
            self.comm = None

    def save(self):
        out = {}
        with tempfile.TemporaryDirectory() as tmp:
            for i, (cfg, rt) in enumerate(sorted(self.runtimes.items())):
                path = os.path.join(tmp, f"state{i}")
                _lib.call("ciuic_runtime_save", rt, path.encode())
                with open(path, "rb") as f:
                    out["|".join(map(str, cfg))] = f.read()
        return out

    def load(self, saved):
        # ciuic_runtime_load is collective: every rank loads the same runtimes in the same order.
        with tempfile.TemporaryDirectory() as tmp:
            for i, key in enumerate(sorted(saved)):
                algo, codec, bucket = key.split("|")
                rt = self._get((algo, codec, int(bucket)))
                path = os.path.join(tmp, f"state{i}")
                with open(path, "wb") as f:
                    f.write(saved[key])
                _lib.call("ciuic_runtime_load", rt, path.encode())
