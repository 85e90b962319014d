#include <gtest/gtest.h>

#include "core/error.h"
#include "core/sizes.h"

namespace ciuic {
namespace {

TEST(Sizes, Units) {
  EXPECT_EQ(ParseSize("8"), 8u);
  EXPECT_EQ(ParseSize("1K"), 1024u);
  EXPECT_EQ(ParseSize("1k"), 1024u);
  EXPECT_EQ(ParseSize("1KiB"), 1024u);
  EXPECT_EQ(ParseSize("1kib"), 1024u);
  EXPECT_EQ(ParseSize("3M"), 3u << 20);
  EXPECT_EQ(ParseSize("2MiB"), 2u << 20);
  EXPECT_EQ(ParseSize("1G"), 1u << 30);
  EXPECT_EQ(ParseSize("1GiB"), 1u << 30);
  EXPECT_EQ(ParseSize("2T"), 2ull << 40);
  EXPECT_EQ(ParseSize("1KB"), 1000u);
  EXPECT_EQ(ParseSize("1mb"), 1000000u);
  EXPECT_EQ(ParseSize("4GB"), 4000000000ull);
  EXPECT_EQ(ParseSize("100B"), 100u);
}

TEST(Sizes, RangesAndLists) {
  const auto a = ParseSizeList("1K:1G");
  ASSERT_EQ(a.size(), 21u);
  EXPECT_EQ(a.front(), 1024u);
  EXPECT_EQ(a.back(), 1u << 30);
  EXPECT_EQ(ParseSizeList("8:64:x4"), (std::vector<uint64_t>{8, 32}));
  EXPECT_EQ(ParseSizeList("1K:4K:+1K"), (std::vector<uint64_t>{1024, 2048, 3072, 4096}));
  EXPECT_EQ(ParseSizeList("1K,8,1M"), (std::vector<uint64_t>{1024, 8, 1 << 20}));
  EXPECT_EQ(ParseSizeList("64M"), (std::vector<uint64_t>{64 << 20}));
  EXPECT_EQ(ParseSizeList("5:5"), (std::vector<uint64_t>{5}));
  EXPECT_EQ(ParseSizeList("1:3:+1"), (std::vector<uint64_t>{1, 2, 3}));
  // The last step may overshoot MAX; it is not included.
  EXPECT_EQ(ParseSizeList("3:10"), (std::vector<uint64_t>{3, 6}));
  // A range reaching the top of uint64 stops instead of wrapping.
  const auto top = ParseSizeList("8T:16777215T:x1024");
  EXPECT_EQ(top, (std::vector<uint64_t>{8ull << 40, 8192ull << 40, 8388608ull << 40}));
}

TEST(Sizes, FormatSize) {
  EXPECT_EQ(FormatSize(1024), "1K");
  EXPECT_EQ(FormatSize(1u << 30), "1G");
  EXPECT_EQ(FormatSize(1000), "1000");
  EXPECT_EQ(FormatSize(3u << 20), "3M");
}

class SizeRejects : public testing::TestWithParam<const char*> {};

TEST_P(SizeRejects, RejectedWithMessage) {
  try {
    ParseSizeList(GetParam());
    FAIL() << "accepted '" << GetParam() << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("size"), std::string::npos) << e.what();
  }
}

// Zero, negative, overflow, MIN > MAX, non-advancing steps, junk, empty items, unknown units.
INSTANTIATE_TEST_SUITE_P(Bad, SizeRejects,
                         testing::Values("", "0", "0K", "0:1K", "1K:0", "-1", "-1K", "-1:1K", "1K:-1",
                                         "18446744073709551616", "99999999999999999999", "16385P", "17179869184G",
                                         "16777216T", "2K:1K", "1G:1M", "8:4", "1K:1G:x1", "1K:1G:x0", "1K:1G:+0",
                                         "1K:1G:x", "1K:1G:+", "1K:1G:2", "1K:1G:*2", "1K:1G:x-2", "1K:1G:+-1K",
                                         "1K:1G:xfoo", "1K:1G:x2.5", "1K:1G:+1Q", "1K:1G:x2:3", "1K::1G", ":1G",
                                         "1K:", ":", "::", "1K,", ",1K", "1K,,2K", ",", "1K,2K:4K", "abc", "K", "1X",
                                         "1 K", " 1K", "1K ", "1.5K", "1e3", "0x10", "1KK", "1Kb2", "1KBB", "1Mi",
                                         "1Gi", "1kibi", "1K:1G:x2x", "+1K", "1K;2K", "1_000", "1,000,", "1K\t",
                                         "1:1:1:1", "12ab", "1PB", "1:1:+1:1"));

}  // namespace
}  // namespace ciuic
