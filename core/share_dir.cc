// ShareDir (core/files.h) in a file of its own: the NCCL plugin compiles files.cc and must not need
// dladdr (GLIBC_2.34 in glibc's libc).
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/files.h"

namespace ciuic {

std::string ShareDir() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  std::error_code ec;
  if (const fs::path exe = fs::read_symlink("/proc/self/exe", ec); !ec)
    candidates.push_back(exe.parent_path() / ".." / "share" / "ciuic");
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ShareDir), &info) && info.dli_fname && *info.dli_fname) {
    const fs::path self = fs::absolute(info.dli_fname, ec);
    if (!ec) candidates.push_back(self.parent_path() / ".." / "share" / "ciuic");
  }
  if (const char* env = std::getenv("CIUIC_SHARE_DIR"); env && *env) candidates.emplace_back(env);
  for (const auto& c : candidates)
    if (fs::is_directory(c, ec)) return c.lexically_normal().string();
  // A tool copied on its own: the user's data folder, where it holds the shipped layout (profiles/).
  if (const char* env = std::getenv("CIUIC_DATA_DIR"); env && *env && fs::is_directory(fs::path(env) / "profiles", ec))
    return fs::path(env).lexically_normal().string();
  return candidates.empty() ? std::string("share/ciuic") : candidates.front().lexically_normal().string();
}

std::string FolderFromEnvironment(const char* var) {
  const char* env = std::getenv(var);
  if (!env || !*env) return "";
  std::error_code ec;
  const auto kind = std::filesystem::status(env, ec).type();
  if (kind == std::filesystem::file_type::directory) return env;
  throw InputError(fmt::format("{} '{}': {}", var, PrintableLine(env),
                               kind == std::filesystem::file_type::not_found ? "no such folder" : "not a folder"));
}

}  // namespace ciuic
