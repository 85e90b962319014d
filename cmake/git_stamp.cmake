cmake_minimum_required(VERSION 3.25)
# Writes OUT (a C++ source defining ciuic::BuildCommit()) from the work tree SRC at build time, so a
# rebuilt binary names the commit it was built from: the short HEAD hash, "-dirty" when tracked
# files differ from HEAD, "unknown" outside a git checkout. The file is rewritten only when the
# text changes, so an unchanged HEAD recompiles nothing.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT commit)
  set(commit "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
                  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(changes)
    string(APPEND commit "-dirty")
  endif()
endif()
file(CONFIGURE OUTPUT ${OUT} CONTENT "// Generated at build time by cmake/git_stamp.cmake.
namespace ciuic {
const char* BuildCommit() { return \"@commit@\"; }
}  // namespace ciuic
" @ONLY)
