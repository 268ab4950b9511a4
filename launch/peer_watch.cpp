#include "launch/peer_watch.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tp {
namespace {

// Fields of /proc/PID/stat after the command name: state and parent pid. False when the process is gone.
bool read_stat(pid_t pid, char& state, pid_t& ppid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(text.substr(close + 1));
  long p = 0;
  if (!(rest >> state >> p)) return false;
  ppid = pid_t(p);
  return true;
}

// OMPI_COMM_WORLD_RANK from /proc/PID/environ; -1 when absent or unreadable.
int env_rank(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string entry;
  const std::string key = "OMPI_COMM_WORLD_RANK=";
  while (std::getline(in, entry, '\0'))
    if (entry.compare(0, key.size(), key) == 0) return std::atoi(entry.c_str() + key.size());
  return -1;
}

}  // namespace

PeerWatch PeerWatch::local_siblings(int own_rank) {
  std::vector<PeerProcess> peers;
  if (!std::getenv("OMPI_COMM_WORLD_RANK")) return PeerWatch{};
  const pid_t parent = getppid(), self = getpid();
  DIR* d = opendir("/proc");
  if (!d) return PeerWatch{};
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (!end || *end != '\0' || pid <= 0 || pid == self) continue;
    char state = 0;
    pid_t ppid = 0;
    if (!read_stat(pid_t(pid), state, ppid) || ppid != parent || state == 'Z') continue;
    const int rank = env_rank(pid_t(pid));
    if (rank >= 0 && rank != own_rank) peers.push_back({rank, pid_t(pid)});
  }
  closedir(d);
  return PeerWatch(std::move(peers));
}

std::string PeerWatch::first_dead() const {
  for (const PeerProcess& p : peers_) {
    char state = 0;
    pid_t ppid = 0;
    if (!read_stat(p.pid, state, ppid) || state == 'Z' || state == 'X')
      return "rank " + std::to_string(p.rank) + " (pid " + std::to_string(p.pid) + ") is gone";
  }
  return "";
}

void PeerWatch::kill_all() const {
  for (const PeerProcess& p : peers_) kill(p.pid, SIGKILL);
}

}  // namespace tp
