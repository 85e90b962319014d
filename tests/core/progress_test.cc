// The live progress line (core/progress.h) with its ticker thread running while other threads print:
// its own binary, since turning the line on changes std::cout and std::cerr for the whole process.
// Run under TSan by scripts/test.sh (the ticker, the stream filters and Begin/Done share one lock).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/log.h"
#include "core/progress.h"

namespace ciuic {
namespace {

off_t SizeOf(int fd) {
  struct stat st {};
  fstat(fd, &st);
  return st.st_size;
}

TEST(Progress, TheTickerRedrawsWhileThreadsPrintAndNoLineIsSplit) {
  char path[] = "/tmp/ciuic-progress-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  ASSERT_GE(saved, 0);
  ASSERT_EQ(dup2(fd, STDERR_FILENO), STDERR_FILENO);
  setenv("CIUIC_PROGRESS", "1", 1);  // on without a terminal
  SetLogPrefix("progress-test");
  ASSERT_TRUE(EnableProgress(true));
  off_t before_pause = 0, after_pause = 0;
  {
    Progress p("sweep", 4, 4);
    std::vector<std::thread> printers;
    for (int t = 0; t < 2; ++t) {
      printers.emplace_back([t] {
        // One write per line, as the tools' log lines are (pieces of one line from two threads would
        // interleave with or without the live line).
        for (int i = 0; i < 50; ++i)
          std::cerr << ("printer " + std::to_string(t) + " line " + std::to_string(i) + " ends here\n");
      });
    }
    for (int item = 0; item < 4; ++item) {
      p.Begin("allreduce " + std::to_string(item), 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      p.Done();
    }
    for (auto& t : printers) t.join();
    // Nothing else draws during this pause: only the ticker (once a second) can add to the file.
    before_pause = SizeOf(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(1600));
    after_pause = SizeOf(fd);
  }
  std::fflush(stderr);
  ASSERT_EQ(dup2(saved, STDERR_FILENO), STDERR_FILENO);
  close(saved);
  std::ifstream in(path, std::ios::binary);
  std::stringstream all;
  all << in.rdbuf();
  close(fd);
  std::remove(path);
  const std::string text = all.str();
  EXPECT_GT(after_pause, before_pause) << "the ticker drew nothing in 1.6 s";
  EXPECT_NE(text.find("progress-test: sweep 4/4 (100%)  "), std::string::npos) << text.substr(0, 400);
  // Each printed line is whole and starts where the live line was cleared ("\r" and erase to the end,
  // not a drawn line's own end) or where a line ended: the line and the printers' output never mix.
  int whole = 0;
  for (int t = 0; t < 2; ++t) {
    for (int i = 0; i < 50; ++i) {
      const std::string line = "printer " + std::to_string(t) + " line " + std::to_string(i) + " ends here\n";
      const size_t at = text.find(line);
      if (at == std::string::npos) continue;
      ++whole;
      const bool after_clear = at >= 4 && text.compare(at - 4, 4, "\r\033[K") == 0;
      const bool after_newline = at == 0 || text[at - 1] == '\n';
      EXPECT_TRUE(after_clear || after_newline)
          << "line at " << at << " follows '" << text.substr(at >= 40 ? at - 40 : 0, 40) << "'";
    }
  }
  EXPECT_EQ(whole, 100);
  // The last thing written clears the line: the terminal is left clean.
  ASSERT_GE(text.size(), 4u);
  EXPECT_EQ(text.substr(text.size() - 4), "\r\033[K");
}

}  // namespace
}  // namespace ciuic
