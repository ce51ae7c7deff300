// What the CLI prints of strings it did not write itself (job names, paths, reasons, log
// lines, servers' error messages): control characters quoted, so that a newline cannot
// forge a line of output and an escape or bell byte cannot reach the reader's terminal.
// JSON output needs none of this: JSON escapes control characters itself.
#ifndef LOCKSTEP_CLIENTS_CLI_TERMINAL_TEXT_H_
#define LOCKSTEP_CLIENTS_CLI_TERMINAL_TEXT_H_

#include <string>
#include <string_view>

namespace lockstep::cli {

// `text` with every control character written out as an escape, as C and Go's %q write
// them: \n, \r, \t, and \xNN for the other C0 bytes and DEL; C1 controls (U+0080..U+009F)
// as \u0080..\u009f; a byte that is not part of valid UTF-8 as \xNN; a backslash as
// itself. Printable text, UTF-8 included, comes back unchanged.
std::string Printable(std::string_view text);

// Printable(), line by line: each "\n" of `text` kept (for text the CLI laid out in lines
// itself, such as a spec as indented JSON).
std::string PrintableLines(std::string_view text);

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_TERMINAL_TEXT_H_
