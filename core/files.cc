#include "core/files.h"

#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace ciuic {

void WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    f << text;
    f.flush();
    if (!f) throw RuntimeError(fmt::format("cannot write '{}'", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw RuntimeError(fmt::format("cannot write '{}'", path));
  }
}

std::string IsoNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace ciuic
