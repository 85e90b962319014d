#pragma once
// Small file and time helpers shared by the tools: output writes that never replace what the user
// pointed at (a device, a FIFO, a symlink), writability checks made before a run, file-name checks
// for names read from JSON, and ISO 8601 UTC stamps.
#include <cstddef>
#include <string>
#include <string_view>

namespace ciuic {

// Writes text to `path`. A regular file (or a new one) is replaced atomically: a temporary file next
// to it is written, fsync'd and renamed over it, so readers never see a half-written file; a symlink
// to a regular file keeps its link and has its target replaced. Anything else (/dev/null, /dev/full,
// a FIFO, a terminal) is written in place, and /dev/stdout, /dev/stderr and /dev/fd/N write to that
// descriptor. Throws RuntimeError naming the path on failure.
void WriteFileAtomically(const std::string& path, const std::string& text);

// Puts a file the caller wrote beside `target` (and closed) in its place durably: fsyncs `tmp`, renames
// it over `target`, fsyncs the folder, so a crash leaves the old file or the new one, never a renamed
// file whose data is still only in the page cache. Throws RuntimeError naming `what` (tmp removed).
void CommitFileDurably(const std::string& tmp, const std::string& target, std::string_view what);

// Throws InputError ("{what} '{path}': ...") unless `path` can be written by WriteFileAtomically (or,
// with regular_file_only, by SQLite): not a directory, its folder exists and accepts new files, an
// existing file is writable. Creates nothing that outlives the call; never opens a FIFO.
void CheckWritableOutput(const std::string& path, std::string_view what, bool regular_file_only = false);

// Throws InputError unless `name` (read from a file, used as a file name) is 1-128 characters of
// [A-Za-z0-9._-] not starting with '.': no '/', no "..", nothing hidden.
void CheckFileNameComponent(const std::string& name, std::string_view what);

// `text` made one printable line for an error message: control characters (a newline included) become
// '?', and more than `limit` characters end in "...".
std::string PrintableLine(std::string_view text, std::size_t limit = 160);
// A path as PrintableLine shows text, but one longer than `limit` keeps its start and its end (the
// file name) around a "...": a message naming it still ends with its reason.
std::string PrintablePath(std::string_view path, std::size_t limit = 240);

// Throws InputError ("{option} '': ...") when a path option was given an empty value: an empty --out or
// --db is a mistake, never "not given".
void CheckPathGiven(std::string_view option, const std::string& path);

// Throws InputError ("{option_a} X and {option_b} Y name the same file") when both paths are non-empty
// and name one file: the same string after normalisation, or the same existing inode (links included).
void CheckDifferentFiles(std::string_view option_a, const std::string& path_a, std::string_view option_b,
                         const std::string& path_b);

// The folder of the tools' default database and profiles, independent of the current directory and
// of the source tree: $CIUIC_DATA_DIR, else $XDG_DATA_HOME/ciuic, else $HOME/.local/share/ciuic. With
// `create`, made on first use (said once on stderr). Throws InputError when neither HOME nor the
// variables name one ("give --db/--out").
std::string DataHome(bool create);

// The folder of the data the tools ship (profiles/: topologies, workloads, baselines, published figures,
// example profiles; scripts/plot.py), found relative to the code itself, never through a path compiled
// in: <the executable's folder>/../share/ciuic (an install prefix; in a build tree CMake links
// build/share/ciuic to the sources), else the same beside the library holding this code
// (libciuic.so loaded by Python: <prefix>/lib/../share/ciuic), else $CIUIC_SHARE_DIR, else
// $CIUIC_DATA_DIR where it holds a profiles/ folder (a tool copied on its own beside its data). When
// none exists, the first candidate (messages then name a folder that is missing).
std::string ShareDir();

// A folder a variable overrides ($CIUIC_PROFILES_DIR, $CIUIC_SCRIPTS_DIR): "" when `var` is unset or
// empty, else its value, which must name a folder: InputError "CIUIC_PROFILES_DIR '/x': no such
// folder" (or "not a folder"), rather than a later message blaming what was looked up in it.
std::string FolderFromEnvironment(const char* var);

// The UTC time now: "2026-11-22T17:48:19Z", or with milliseconds "2026-11-22T17:48:19.123Z" (rows
// stored together share a stamp, two stores a moment apart do not).
std::string IsoNow(bool milliseconds = false);

// This machine's CPU model ("model name" in /proc/cpuinfo), "unknown" when it names none.
std::string CpuModelName();

}  // namespace ciuic
