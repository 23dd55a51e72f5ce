#pragma once
// Channel names and subscription patterns, and printable stream names.
//
// A channel name is 1..max_channel_length bytes of dot-separated, non-empty
// tokens of printable ASCII other than space, '*' and '>'
// ("orders.eu.created"). A pattern has the same shape, and a token may also be
// `*` (exactly one token) or, as the last token only, `>` (one or more tokens).

#include <cstddef>
#include <string_view>

namespace switchyard::protocol {

inline constexpr std::size_t max_channel_length = 255;
inline constexpr std::size_t max_channel_tokens = 32;

bool is_valid_channel(std::string_view name) noexcept;
bool is_valid_pattern(std::string_view pattern) noexcept;

// True when `channel` (a valid channel name) matches `pattern` (a valid pattern).
bool pattern_matches(std::string_view pattern, std::string_view channel) noexcept;

// Stream names (docs/protocol.md §13): the log takes any 1..255 bytes, but
// a SetRetention with limits, which may create the stream, takes only
// 1..255 bytes of printable ASCII (0x21..0x7E: no spaces, control or
// non-ASCII bytes), so that a slip on a command line cannot create a stream
// nobody can type. Every channel name passes (a durable channel's stream
// is named like its channel).
inline constexpr std::size_t max_stream_name_length = 255;
bool is_printable_stream_name(std::string_view name) noexcept;

// Splits off the first token of `rest` (up to '.') and advances `rest` past
// it and its dot. Precondition: rest is not empty.
std::string_view next_token(std::string_view& rest) noexcept;

}  // namespace switchyard::protocol
