#pragma once
// The size grammar of docs/ciuic-bench.md ("Usage"): a size is a positive integer with an optional unit (none = bytes;
// K/KiB, M/MiB, G/GiB, T/TiB binary; KB/MB/GB/TB decimal; case-insensitive). A size list is
// MIN:MAX[:STEP] with STEP `xF` (multiply, default x2) or `+SIZE` (add), or a comma list.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ciuic {

// Throws InputError naming the offending text.
uint64_t ParseSize(std::string_view text);
std::vector<uint64_t> ParseSizeList(std::string_view spec);
// "1K", "64M", "1G" when exact in binary units, else the byte count.
std::string FormatSize(uint64_t bytes);

}  // namespace ciuic
