#pragma once
// Small file and time helpers shared by the tools: atomic text writes and ISO 8601 UTC stamps.
#include <string>

namespace ciuic {

// Writes text to a temporary file next to `path`, then renames it over `path` (readers never see a
// half-written file). Throws RuntimeError naming the path on failure.
void WriteFileAtomically(const std::string& path, const std::string& text);

// "2026-11-22T17:48:19Z".
std::string IsoNow();

}  // namespace ciuic
