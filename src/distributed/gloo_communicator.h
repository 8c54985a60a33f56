// The Communicator of groups of several ranks: Gloo's TCP transport (Debian's libgloo-dev), with
// every call's signature exchanged and compared before its data moves (kiln/process_group.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "kiln/process_group.h"

namespace gloo::rendezvous {
class Store;
}

namespace kiln::distributed {

// Rank `rank` of `size`, connected to the others through store (a directory's FileStore, or a
// HashStore the ranks of one process share), listening on hostname. DistributedError when the
// ranks do not all arrive within timeout, or a connection fails.
std::shared_ptr<Communicator> connect_gloo(gloo::rendezvous::Store& store, int rank, int size,
                                           const std::string& hostname,
                                           std::chrono::milliseconds timeout);

}  // namespace kiln::distributed
