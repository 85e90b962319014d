#include "collectives/runtime.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "core/error.h"

namespace ciuic {

namespace {

constexpr char kMagic[8] = {'C', 'I', 'U', 'I', 'C', 'E', 'F', 'S'};
constexpr uint32_t kStateVersion = 1;

void PutBuffer(std::ostream& out, const Buffer& b, size_t floats) {
  const uint64_t n = b.bytes() ? floats : 0;
  out.write(reinterpret_cast<const char*>(&n), 8);
  if (!n) return;
  std::vector<float> host(n);
  CopyBytes(host.data(), MemoryKind::kHost, b.data(), b.kind(), n * 4);
  out.write(reinterpret_cast<const char*>(host.data()), static_cast<std::streamsize>(n * 4));
}

template <class T>
T Get(std::istream& in, const std::string& path) {
  T v{};
  in.read(reinterpret_cast<char*>(&v), sizeof(T));
  if (!in) throw InputError(fmt::format("state file '{}' is truncated", path));
  return v;
}

Buffer GetBuffer(std::istream& in, MemoryKind kind, const std::string& path) {
  const auto n = Get<uint64_t>(in, path);
  if (n == 0) return Buffer();
  if (n > (uint64_t{1} << 34)) throw InputError(fmt::format("state file '{}' is corrupt (a buffer of {} floats)", path, n));
  std::vector<float> host(n);
  in.read(reinterpret_cast<char*>(host.data()), static_cast<std::streamsize>(n * 4));
  if (!in) throw InputError(fmt::format("state file '{}' is truncated", path));
  Buffer b(n * 4, kind);
  CopyBytes(b.data(), kind, host.data(), MemoryKind::kHost, n * 4);
  return b;
}

}  // namespace

Runtime::Runtime(Communicator& comm, const RuntimeConfig& config)
    : comm_(comm), config_(config), engine_(comm, config.algo) {
  if (config.bucket_bytes < 4) throw UsageError("bucket bytes must hold at least one fp32 element");
  flag_ = Buffer(4, comm.BufferKind());
  SetBytes(flag_.data(), comm.BufferKind(), 0, 4, comm.Stream());
}

void Runtime::Reduce(float* data, size_t n, uint64_t key_id, uint64_t key_bucket, bool average) {
  if (config_.check_finite) {
    // Every rank learns whether any rank's gradient holds NaN/Inf, so all fail together (none hangs).
    UnscaleCheckNorm(data, n, 1.0f, flag_.as<uint32_t>(), nullptr, comm_.Stream());
    uint32_t flag = 0;
    CopyBytes(&flag, MemoryKind::kHost, flag_.data(), flag_.kind(), 4, comm_.Stream());  // after the check kernel
    double any = flag;
    comm_.HostAllReduce(&any, 1, ReduceOp::kMax);
    if (any != 0) {
      SetBytes(flag_.data(), flag_.kind(), 0, 4, comm_.Stream());
      throw InputError(fmt::format("tensor {} bucket {}: a gradient holds NaN or Inf on {} (nothing was reduced)",
                                   key_id, key_bucket, flag ? "this rank" : "another rank"));
    }
  }
  engine_.Run(data, n, &states_[{key_id, key_bucket}], average);
}

void Runtime::AllReduce(float* data, size_t n, uint64_t tensor_id, bool average) {
  const size_t per = std::max<size_t>(config_.bucket_bytes / 4, 1);
  for (size_t b = 0, i = 0; b < n; b += per, ++i) Reduce(data + b, std::min(per, n - b), tensor_id, i, average);
}

void Runtime::AllReduceTensors(const std::vector<TensorRef>& tensors, const std::vector<uint64_t>& ids,
                               bool average) {
  if (ids.size() != tensors.size()) throw UsageError("AllReduceTensors: one id per tensor");
  const size_t per = std::max<size_t>(config_.bucket_bytes / 4, 1);
  size_t first = 0;
  while (first < tensors.size()) {
    // A bucket: consecutive tensors up to `per` elements (a larger tensor goes alone, split by AllReduce).
    size_t last = first, count = 0;
    while (last < tensors.size() && (last == first || count + tensors[last].count <= per)) count += tensors[last++].count;
    if (last == first + 1) {
      AllReduce(tensors[first].data, tensors[first].count, ids[first], average);
    } else {
      if (bucket_.bytes() < count * 4 || bucket_.kind() != comm_.BufferKind())
        bucket_ = Buffer(count * 4, comm_.BufferKind());
      FlattenTensors(tensors.data() + first, static_cast<int>(last - first), bucket_.as<float>(), comm_.Stream());
      // The bucket's state is keyed by its first tensor's id and its composition (tensor count).
      Reduce(bucket_.as<float>(), count, ids[first], (uint64_t{1} << 63) | (last - first), average);
      UnflattenTensors(bucket_.as<float>(), tensors.data() + first, static_cast<int>(last - first), comm_.Stream());
    }
    first = last;
  }
  comm_.Synchronize();
}

void Runtime::Save(const std::string& path) const {
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, getpid(), comm_.Rank());
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) throw InputError(fmt::format("cannot write state file '{}'", tmp));
    out.write(kMagic, 8);
    const uint32_t head[3] = {kStateVersion, static_cast<uint32_t>(comm_.Size()), static_cast<uint32_t>(comm_.Rank())};
    out.write(reinterpret_cast<const char*>(head), sizeof head);
    const std::string codec = engine_.codec().Name();
    const uint64_t len = codec.size(), count = states_.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(codec.data(), static_cast<std::streamsize>(len));
    out.write(reinterpret_cast<const char*>(&count), 8);
    for (const auto& [key, st] : states_) {
      const uint64_t rec[4] = {key.first, key.second, st.step, st.count};
      out.write(reinterpret_cast<const char*>(rec), sizeof rec);
      PutBuffer(out, st.residual, st.residual.bytes() / 4);
      PutBuffer(out, st.server_residual, st.server_residual.bytes() / 4);
      PutBuffer(out, st.q, st.q.bytes() / 4);
    }
    out.flush();
    if (!out) throw RuntimeError(fmt::format("cannot write state file '{}'", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw RuntimeError(fmt::format("cannot write state file '{}': {}", path, ec.message()));
}

void Runtime::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("cannot read state file '{}'", path));
  char magic[8];
  in.read(magic, 8);
  if (!in || std::memcmp(magic, kMagic, 8) != 0) throw InputError(fmt::format("'{}' is not a ciuic state file", path));
  const auto version = Get<uint32_t>(in, path), size = Get<uint32_t>(in, path), rank = Get<uint32_t>(in, path);
  if (version > kStateVersion)
    throw InputError(fmt::format("state file '{}' has format {} (this build reads up to {})", path, version, kStateVersion));
  if (size != static_cast<uint32_t>(comm_.Size()))
    throw InputError(fmt::format("state file '{}' was saved by {} ranks; the world now has {}: error-feedback state "
                                 "cannot be carried across world sizes",
                                 path, size, comm_.Size()));
  if (rank != static_cast<uint32_t>(comm_.Rank()))
    throw InputError(fmt::format("state file '{}' belongs to rank {}, not rank {}", path, rank, comm_.Rank()));
  const auto len = Get<uint64_t>(in, path);
  if (len > 256) throw InputError(fmt::format("state file '{}' is corrupt", path));
  std::string codec(len, '\0');
  in.read(codec.data(), static_cast<std::streamsize>(len));
  if (codec != engine_.codec().Name())
    throw InputError(fmt::format("state file '{}' is for codec {}, the runtime uses {}", path, codec,
                                 engine_.codec().Name()));
  const auto count = Get<uint64_t>(in, path);
  std::map<std::pair<uint64_t, uint64_t>, CodecState> loaded;
  const MemoryKind kind = comm_.BufferKind();
  for (uint64_t i = 0; i < count; ++i) {
    const auto id = Get<uint64_t>(in, path), bucket = Get<uint64_t>(in, path);
    CodecState st;
    st.step = Get<uint64_t>(in, path);
    st.count = Get<uint64_t>(in, path);
    st.residual = GetBuffer(in, kind, path);
    st.server_residual = GetBuffer(in, kind, path);
    st.q = GetBuffer(in, kind, path);
    loaded[{id, bucket}] = std::move(st);
  }
  states_ = std::move(loaded);  // only now: a bad file leaves the old state untouched
}

}  // namespace ciuic
