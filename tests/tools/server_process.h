// Starts `tessera serve` on a free port as a child process for the server
// tests, waits until /health says ok, and stops it with SIGTERM.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

namespace tessera::testing {

class ServerProcess {
 public:
  // `args`: what follows `tessera serve` (the model, -np, ...); `launcher`:
  // what comes before tessera (mpirun and its flags), if anything.
  explicit ServerProcess(const std::vector<std::string>& args,
                         const std::vector<std::string>& launcher = {}) {
    log_ = std::filesystem::temp_directory_path() /
           ("tessera-serve-" + std::to_string(getpid()) + "-" + std::to_string(counter()++) + ".log");
    std::vector<std::string> argv = launcher;
    for (const char* a : {TESSERA_BIN, "serve", "--port", "0"}) argv.emplace_back(a);
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ == 0) {
      std::freopen(log_.c_str(), "w", stderr);
      std::vector<char*> c;
      for (std::string& a : argv) c.push_back(a.data());
      c.push_back(nullptr);
      execv(c[0], c.data());
      _exit(127);
    }
    // The port from "listening on http://HOST:PORT", then /health ok.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    const std::regex listening(R"(listening on http://[^:]+:(\d+))");
    while (port_ == 0) {
      if (std::chrono::steady_clock::now() > deadline || exited()) {
        throw std::runtime_error("tessera serve did not start:\n" + log());
      }
      std::smatch m;
      const std::string text = log();
      if (std::regex_search(text, m, listening)) port_ = std::stoi(m[1]);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    while (true) {
      if (std::chrono::steady_clock::now() > deadline || exited()) {
        throw std::runtime_error("tessera serve never became ready:\n" + log());
      }
      auto r = client().Get("/health");
      if (r && r->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~ServerProcess() {
    if (pid_ > 0 && !exited()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove(log_);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    c.set_tcp_nodelay(true);
    return c;
  }
  std::string log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Resident set size in KiB, from /proc.
  long rss_kib() const { return status_kib("VmRSS:"); }
  long peak_rss_kib() const { return status_kib("VmHWM:"); }
  long status_kib(const std::string& field) const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(field, 0) == 0) return std::stol(line.substr(field.size()));
    }
    return -1;
  }
  // SIGTERM, then the exit code (-1 if it did not exit within `seconds`).
  int terminate(int seconds = 20) {
    kill(pid_, SIGTERM);
    return wait_exit(seconds);
  }
  // The exit code once it ends by itself (-1 if not within `seconds`).
  int wait_exit(int seconds = 20) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      if (exited()) return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  bool exited() {
    if (done_) return true;
    if (waitpid(pid_, &status_, WNOHANG) == pid_) done_ = true;
    return done_;
  }

  std::filesystem::path log_;
  pid_t pid_ = -1;
  int port_ = 0;
  int status_ = 0;
  bool done_ = false;
};

// The value of a Prometheus metric of `s`'s /metrics (-1 when absent).
inline long metric(const ServerProcess& s, const std::string& name) {
  auto m = s.client().Get("/metrics");
  if (!m) return -1;
  const auto at = m->body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stol(m->body.substr(at + name.size() + 2));
}

// A model slow enough that a long generation outlives its client: the
// random-weight "tiny" shape, written once per test process.
inline std::string slow_model() {
  // Held by a pointer that outlives the statics, so the exit handler that
  // removes the file can still read it.
  static const std::string* path = [] {
    auto* p = new std::string((std::filesystem::temp_directory_path() /
                               ("tessera-server-tiny-" + std::to_string(getpid()) + ".gguf"))
                                  .string());
    const int rc = std::system((std::string(TESSERA_BIN) + " synth --shape tiny --type q8_0 -o " + *p +
                                " >/dev/null 2>&1").c_str());
    if (rc != 0) throw std::runtime_error("tessera synth could not write " + *p);
    std::atexit([] { std::filesystem::remove(*path); });
    return p;
  }();
  return *path;
}

}  // namespace tessera::testing
