// MpiWorld over Open MPI (or any MPI 3): point-to-point bytes for the
// pipeline, an all-gather of strings for the start-up checks.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <deque>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/dist/mpi.h"

namespace tessera {
namespace {

// Set by mpirun / orterun (Open MPI), PMI / PMIx launchers (MPICH, Slurm).
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(code, text, &n);
  return std::string(text, static_cast<size_t>(n));
}

void check(int code, const char* what, int peer) {
  if (code != MPI_SUCCESS) {
    fail(ErrorCategory::kDevice, "[mpi] {} rank {}: {}", what, peer, mpi_error(code));
  }
}

int int_count(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT_MAX)) {
    fail(ErrorCategory::kInvalidArgument, "[mpi] {} of {} bytes, more than one message holds", what, n);
  }
  return static_cast<int>(n);
}

constexpr int kTag = 7;
constexpr auto kSpin = std::chrono::microseconds(50);
constexpr auto kFirstNap = std::chrono::microseconds(50);
constexpr auto kLongestNap = std::chrono::microseconds(400);
constexpr auto kFlushLimit = std::chrono::seconds(10);

class MpiTransport final : public Transport {
 public:
  MpiTransport(int rank, int size, std::string host) : rank_(rank), size_(size), host_(std::move(host)) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& host() const override { return host_; }

  ~MpiTransport() override {
    try {
      flush();
    } catch (const std::exception&) {
      // A peer is gone; mpirun reports it.
    }
  }

  // MPI_Isend: the message stays in sends_ until MPI is done with it. A
  // blocking MPI_Send of a message past the eager limit would wait for the
  // receiver, and two ranks sending each other answers at once would wait
  // for ever.
  void send(int to, std::vector<std::byte> message) override {
    reap();
    Outgoing& o = sends_.emplace_back();
    o.bytes = std::move(message);
    o.to = to;
    const int code = MPI_Isend(o.bytes.data(), int_count(o.bytes.size(), "a message"), MPI_BYTE, to,
                               kTag, MPI_COMM_WORLD, &o.request);
    if (code != MPI_SUCCESS) {
      sends_.pop_back();
      check(code, "sending to", to);
    }
  }

  // Waits up to kFlushLimit for the sends to leave: a peer that stopped
  // receiving (gone, or stuck) must not hang this rank's exit.
  void flush() override {
    auto nap = kFirstNap;
    const auto start = std::chrono::steady_clock::now();
    while (!sends_.empty()) {
      if (reap()) continue;
      if (std::chrono::steady_clock::now() - start > kFlushLimit) {
        fail(ErrorCategory::kDevice, "[mpi] {} messages to other ranks not delivered after {} s",
             sends_.size(), std::chrono::duration_cast<std::chrono::seconds>(kFlushLimit).count());
      }
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, kLongestNap);
    }
  }

  // A blocking MPI_Probe spins on its core for as long as it waits: a rank
  // waiting for its turn would take a core from the rank computing (on one
  // machine) and from its own CPU pool's threads. So: probe for ~50 us, then
  // sleep between probes, 50 us doubling up to 400 us: a message waits at
  // most that long (under 1% of a 50 ms decode step), and a rank waiting
  // for a long step wakes ~2500 times a second instead of spinning.
  void recv(int from, std::vector<std::byte>& message) override {
    MPI_Status status;
    const auto start = std::chrono::steady_clock::now();
    auto nap = kFirstNap;
    for (int arrived = 0;;) {
      check(MPI_Iprobe(from, kTag, MPI_COMM_WORLD, &arrived, &status), "waiting for", from);
      if (arrived) break;
      reap();
      if (std::chrono::steady_clock::now() - start > kSpin) {
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, kLongestNap);
      }
    }
    int n = 0;
    check(MPI_Get_count(&status, MPI_BYTE, &n), "sizing a message from", from);
    message.resize(static_cast<size_t>(n));
    check(MPI_Recv(message.data(), n, MPI_BYTE, from, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
          "receiving from", from);
  }

  std::vector<std::string> all_gather(const std::string& mine) override {
    const int n = int_count(mine.size(), "a gathered string");
    std::vector<int> sizes(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
    check(MPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD), "gathering with",
          -1);
    size_t total = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      offsets[i] = int_count(total, "gathered strings");
      total += static_cast<size_t>(sizes[i]);
    }
    std::string all(total, '\0');
    check(MPI_Allgatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(),
                         MPI_CHAR, MPI_COMM_WORLD),
          "gathering with", -1);
    std::vector<std::string> out;
    for (size_t i = 0; i < sizes.size(); ++i) {
      out.push_back(all.substr(static_cast<size_t>(offsets[i]), static_cast<size_t>(sizes[i])));
    }
    return out;
  }

 private:
  struct Outgoing {
    std::vector<std::byte> bytes;
    int to = 0;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  // Forgets the sends MPI has finished with (in order: MPI completes the
  // sends to one rank in order, and a later one to another rank waits its
  // turn here, which costs nothing but a little memory). True if any went.
  bool reap() {
    bool any = false;
    while (!sends_.empty()) {
      int done = 0;
      Outgoing& o = sends_.front();
      check(MPI_Test(&o.request, &done, MPI_STATUS_IGNORE), "sending to", o.to);
      if (!done) break;
      sends_.pop_front();
      any = true;
    }
    return any;
  }

  int rank_, size_;
  std::string host_;
  std::deque<Outgoing> sends_;
};

}  // namespace

struct MpiWorld::State {
  bool started = false;
  int rank = 0;
  int size = 1;
  std::string host;
  std::unique_ptr<MpiTransport> transport;
};

bool MpiWorld::built() { return true; }

MpiWorld::MpiWorld(int& argc, char**& argv) : state_(std::make_unique<State>()) {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  state_->host = name;
  if (!launched_by_mpi()) return;
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    fail(ErrorCategory::kDevice, "[mpi] MPI_Init_thread failed");
  }
  state_->started = true;
  // Errors come back as codes (and become Error), not as MPI's own abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &state_->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &state_->size);
  if (provided < MPI_THREAD_SERIALIZED) {
    fail(ErrorCategory::kUnsupported,
         "[mpi] this MPI gives thread level {}, tessera needs MPI_THREAD_SERIALIZED ({})", provided,
         MPI_THREAD_SERIALIZED);
  }
  if (state_->size > 1) {
    state_->transport = std::make_unique<MpiTransport>(state_->rank, state_->size, state_->host);
  }
}

MpiWorld::~MpiWorld() {
  state_->transport.reset();  // its last sends, before MPI ends
  if (state_->started) MPI_Finalize();
}

int MpiWorld::rank() const { return state_->rank; }
int MpiWorld::size() const { return state_->size; }
const std::string& MpiWorld::host() const { return state_->host; }
Transport* MpiWorld::transport() const { return state_->transport.get(); }

void MpiWorld::abort(int code) const {
  if (state_->started) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace tessera
