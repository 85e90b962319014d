#pragma once
// Local backend: N ranks as threads of one process. Point-to-point is buffered (a send copies into
// the receiver's mailbox and completes at once); native collectives read the peers' published
// buffers directly, reduce in rank order (deterministic), and end with a barrier. A rank that throws
// poisons the world so its peers fail instead of hanging.
#include <functional>
#include <memory>

#include "collectives/communicator.h"

namespace ciuic {

class LocalWorld;

// Runs fn on `size` threads, each with its own rank's communicator; rethrows the first exception.
void RunLocalRanks(int size, const std::function<void(Communicator&)>& fn);

// The communicators of a new world, one per rank (each used by one thread).
std::vector<std::unique_ptr<Communicator>> MakeLocalWorld(int size);

}  // namespace ciuic
