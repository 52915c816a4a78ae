// One entry of the cluster's write log (docs/cluster.md): its format, its
// encoder and its decoder, side by side. No NATS here: an entry is bytes.
//
// Entry = u8 version (1) | u8 type | u64 request id | i64 deadline (unix
//         ms, the origin's clock + --nats-timeout-ms) | u16 origin length |
//         origin node id | payload
// Integers are little-endian; strings are u32 length | bytes.
//
// Payload by type:
//   kWrite        u8 single | u32 op count | per op: u8 kind (0 put,
//                 1 delete) | u8 conditions (bit 0: if_match present,
//                 bit 1: If-Match *, bit 2: If-None-Match *) | [u64
//                 if_match] | str collection | str id | str body
//   kChunk        u32 chunk index | bytes: a slice of a kWrite payload too
//                 large for one message
//   kCommit       u32 chunk count | u64 payload bytes: the chunks of the
//                 same (origin, request id), concatenated in index order,
//                 are a kWrite payload; applied only once this entry is
//                 in the log (a bulk is all or nothing)
//   kIndexPut     str name | str definition JSON
//   kIndexDelete  str name
//
// A decoder given arbitrary bytes returns Corruption, never reads past them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "storage/document_store.h"

namespace corvid::cluster {

enum class EntryType : uint8_t { kWrite = 1, kChunk = 2, kCommit = 3, kIndexPut = 4, kIndexDelete = 5 };

struct EntryHeader {
  EntryType type = EntryType::kWrite;
  uint64_t request_id = 0;
  int64_t deadline_ms = 0;
  std::string origin;
};

// The header, then the payload encoders append to `out`.
void EncodeHeader(const EntryHeader& h, std::string& out);
void EncodeWritePayload(const storage::WriteRequest& request, std::string& out);
void EncodeChunkPayload(uint32_t index, std::string_view bytes, std::string& out);
void EncodeCommitPayload(uint32_t chunks, uint64_t bytes, std::string& out);
void EncodeIndexPayload(std::string_view name, std::string_view definition, std::string& out);

// Splits `entry` into its header and the payload after it.
Status DecodeHeader(std::string_view entry, EntryHeader& h, std::string_view& payload);
Status DecodeWritePayload(std::string_view payload, storage::WriteRequest& request);
Status DecodeChunkPayload(std::string_view payload, uint32_t& index, std::string_view& bytes);
Status DecodeCommitPayload(std::string_view payload, uint32_t& chunks, uint64_t& bytes);
// kIndexDelete payloads have no definition: `definition` is left empty.
Status DecodeIndexPayload(std::string_view payload, EntryType type, std::string& name, std::string& definition);

}  // namespace corvid::cluster
