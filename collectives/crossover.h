#pragma once
// What `--algo auto` runs for an uncompressed fp32 allreduce: one of the runtime's algorithms per
// message size (native = the transport's own allreduce, rd, ring, hier), from a crossover table.
// The table comes from a short measurement on the job's own world (MeasureCrossover: every
// candidate at a few sizes, the slowest rank's time), from a file written by one, or, with neither,
// from a built-in default per transport. Every rank must run the same table: the runtime's call
// agreement carries its digest, so ranks that read different tables fail together, named.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectives/algorithms/allreduce.h"
#include "collectives/communicator.h"

namespace ciuic {

struct CrossoverBand {
  uint64_t below_bytes;  // messages of fewer bytes than this (the last band: UINT64_MAX)
  AllReduceAlgo algo;
};

struct Crossover {
  std::string source;                // "built-in (mpi)", "measured on 2 ranks", "file x.json": for messages
  std::vector<CrossoverBand> bands;  // ascending below_bytes, the last one UINT64_MAX
  // Out of place (a source apart from the result), where it differs: there the transport's own
  // allreduce and the ring pay differently (the ring reads the source where it lies). Empty: the
  // bands above for both placements. Every rank of one call must use the same placement (as
  // MPI_IN_PLACE must be given on every rank); ciuic::Runtime always reduces in place.
  std::vector<CrossoverBand> out_of_place;
  // Below this many bytes the table's ring assumes the ring staged through a shared window (one
  // host, AlgoConfig::staged_bytes): where the engine cannot stage a call it chooses the ring for,
  // native runs it instead. 0: the ring is the ring wherever it runs (measured tables).
  uint64_t staged_below = 0;

  AllReduceAlgo Choose(uint64_t bytes, bool out_of_place = false) const;
  uint64_t Digest() const;       // of both placements' bands and staged_below
  std::string Describe() const;  // "native <8 MiB, ring" for logs, then "; out of place: ..." where it differs
};

// The default with no measurement: the transport's own allreduce up to 8 MiB, the ring above on
// host transports (mpi, gloo, local); nccl: its own allreduce at every size. Where the world is
// known to run on one host (`hosts` 1), host transports take the ring staged through a shared window
// from 2 KiB to 512 KiB (staged_below 512 KiB: native where a call cannot be staged), and out of
// place the ring from 2 KiB up.
Crossover BuiltinCrossover(const std::string& transport, int hosts = 0);

// The algorithms auto may choose from on `comm` (collective when it asks for host names): native,
// rd, ring, and hier where the world spans several hosts with equal ranks per host.
// `hosts`, when given, receives how many hosts the ranks run on (from the same gather).
std::vector<AllReduceAlgo> CrossoverCandidates(Communicator& comm, int* hosts = nullptr);

// One measured size: the slowest rank's median µs per call for each candidate, and the transport's
// own call made directly (the library, without the runtime around it).
struct CrossoverPoint {
  uint64_t bytes = 0;
  double library_us = 0;
  std::map<AllReduceAlgo, double> us;
  double auto_us = 0;                              // with CrossoverOptions::with_auto: auto over that table
  AllReduceAlgo auto_algo = AllReduceAlgo::kAuto;  // what its table names at this size
  bool auto_ran_native = false;                    // every timed auto call ran native (a ring band unstaged)
  double runtime_us = 0;                           // with CrossoverOptions::with_runtime: its AllReduce
};

// The table from measured points (pure: the same points give the same table on every rank). At each
// size the fastest candidate wins, native unless another is more than `margin` faster (the library
// is the safe choice on a tie); a change of choice between two measured sizes goes at their
// geometric mean; sizes below the first point take its choice, above the last the last's.
Crossover CrossoverFromPoints(const std::vector<CrossoverPoint>& points, double margin = 0.03);
// What a table measured out of place adds to one measured in place: its bands, or none where they
// are the same.
std::vector<CrossoverBand> OutOfPlaceBands(const Crossover& in_place, const Crossover& out_of_place);

struct CrossoverOptions {
  std::vector<uint64_t> sizes;                 // empty: 1 KiB to 64 MiB, x4
  int rounds = 3;                              // candidates alternate within each round; each point keeps the median
  double target_s = 0.004;                     // timed seconds per candidate, size and round (at least 3 calls)
  std::shared_ptr<const Crossover> with_auto;  // also time auto choosing from this table
  // Also time this communicator's AllReduce (fp32 sum) on the same buffers: the runtime as `--backend
  // ciuic` calls it (MakeRuntimeCommunicatorOver the same transport), its fixed costs included. Not
  // with `registered` (its engine does not know the table's window).
  Communicator* with_runtime = nullptr;
  // Time every call on buffers in a shared window every rank maps (SharedWindow; one host, CPU),
  // registered with every engine: the ring's column is then the ring over the window (MappedRing).
  bool registered = false;
  // Time every call out of place (a source apart from the result, both in the window when registered)
  // instead of in place.
  bool out_of_place = false;
};
// Collective: measures every candidate (and the library) on `comm` at each size and returns the
// points; the table is CrossoverFromPoints(points). All ranks return the same values.
std::vector<CrossoverPoint> MeasureCrossover(Communicator& comm, const std::vector<AllReduceAlgo>& candidates,
                                             const CrossoverOptions& options = {});

// Written and read as JSON: {"format": "ciuic-crossover", "version": 1, "ranks": P, "transport": "mpi",
// "bands": [{"below_bytes": B|null, "algo": "native"}, ...], "points": [{"bytes": B, "library_us": x,
// "us": {"ring": y, ...}}, ...]}. Reading checks every field and throws InputError naming it.
// A table measured on registered buffers also carries "buffers": "registered"; `hosts` > 0 is
// written as "hosts": how many hosts the measured world spanned (on one host the ring stages small
// calls through a shared window, across hosts it cannot: the times differ).
// A table whose out-of-place bands differ carries them as "bands_out_of_place" (and the points they
// came from as "points_out_of_place"), checked as "bands" and "points" are.
std::string CrossoverJson(const Crossover& table, const std::vector<CrossoverPoint>& points, int ranks,
                          const std::string& transport, bool registered = false, int hosts = 0,
                          const std::vector<CrossoverPoint>& points_out_of_place = {});
// `points`, when given, receives the measured points the file carries (each checked: a positive
// multiple of 4 bytes, ascending, positive finite times of native/rd/ring/hier). `registered`, when
// given, receives whether the file says its times were measured on registered buffers; `hosts` its
// host count (a positive integer up to ranks; 0 where the file does not say).
// `points_out_of_place`, when given, receives the out-of-place points (empty where the file has none).
Crossover ReadCrossoverFile(const std::string& path, int* ranks = nullptr, std::string* transport = nullptr,
                            std::vector<CrossoverPoint>* points = nullptr, bool* registered = nullptr,
                            int* hosts = nullptr, std::vector<CrossoverPoint>* points_out_of_place = nullptr);
Crossover ParseCrossover(const std::string& text, const std::string& name, int* ranks = nullptr,
                         std::string* transport = nullptr, std::vector<CrossoverPoint>* points = nullptr,
                         bool* registered = nullptr, int* hosts = nullptr,
                         std::vector<CrossoverPoint>* points_out_of_place = nullptr);

// A table measured on one host (`hosts` 1) on unregistered host buffers timed, in its ring column, the
// ring staged through a shared window up to the measuring engine's staged_bytes (AlgoConfig's
// default): sets staged_below past that, so that where a run cannot stage such a call (a rank per PID
// namespace, no memfd, a smaller staged_bytes) native runs it, as with the one-host built-in table,
// instead of the ring over the transport the table never timed there. Leaves other tables alone.
void MarkStagedRing(Crossover& table, int hosts, bool registered, DeviceKind device);

// How many hosts `comm`'s ranks run on (by host name). Collective.
int CrossoverHosts(Communicator& comm);
// The calibration database's device key of a crossover measured on `hosts` hosts: `device` itself
// for one host (or an unknown count, 0), "DEVICE (N hosts)" across N: a table calibrated on one host
// is never read for a world that spans several, nor the other way round.
std::string CrossoverDeviceKey(const std::string& device, int hosts);

// The calibration database (`ciuic-tune calibrate --ranks P`; table calibrations, one row per point
// and candidate: kernel "crossover:<transport>", out of place "crossover:<transport>:out-of-place",
// codec the algorithm or "library", bytes, ranks, and the time as the table's GB/s). Stored as one
// calibration: every row shares its `created` stamp.
void StoreCrossoverPoints(const std::string& db_path, const std::string& device, const std::string& transport,
                          int ranks, const std::vector<CrossoverPoint>& points,
                          const std::vector<CrossoverPoint>& points_out_of_place = {});
// The newest calibration stored for (device, transport, ranks), never mixed with older ones; empty
// when there is none (no file, an empty one, a schema without sized calibrations). *created gets its
// stamp. Throws InputError for a file that is not a ciuic database.
// `out_of_place`: the out-of-place points instead.
std::vector<CrossoverPoint> LoadCrossoverPoints(const std::string& db_path, const std::string& device,
                                                const std::string& transport, int ranks, std::string* created = nullptr,
                                                bool out_of_place = false);
// The table from stored points, choosing only among `candidates` (a calibration made where hier ran
// is read on one host without it); empty bands when no point has a candidate's time.
Crossover CrossoverFromStoredPoints(std::vector<CrossoverPoint> points, const std::vector<AllReduceAlgo>& candidates);

// The table `comm`'s world reads from the calibration database at `db_path` (empty: the data folder's
// ciuic.db, DataHome): the newest crossover stored for this machine's CPU model, the transport and
// the world size, choosing among CrossoverCandidates(comm) (out-of-place bands from the same
// calibration's out-of-place points, where it stored them). Collective: every rank reads its own
// database and the ranks agree on what they read. With nothing stored (no data folder, no file, no
// calibration for this world, a GPU transport) it is the built-in table, its source saying why,
// unless `required`. Throws InputError, the same message on every rank, when a rank cannot read its
// database, when the ranks read different tables, or (required) when nothing is stored.
std::shared_ptr<Crossover> CalibratedCrossover(Communicator& comm, const std::string& db_path, bool required);

// The table a runtime made through the C API (or ciuic.torch) runs for `--algo auto`, from
// $CIUIC_CROSSOVER: unset or empty, the data folder's calibration database with the built-in table
// where it holds none; "db" the same but nothing stored is an error; "db:PATH" that database
// (required); "builtin"; anything else a crossover file (`ciuic-bench --crossover-out`). Collective
// for the database sources. Throws InputError naming $CIUIC_CROSSOVER.
std::shared_ptr<const Crossover> RuntimeCrossover(Communicator& comm);

}  // namespace ciuic
