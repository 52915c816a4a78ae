// The LMDB-backed MapReduceIndex (internal to mapreduce/): Open and
// ApplyBatch live in mapreduce_index.cc, Query in query.cc. The on-disk
// layout is documented in mapreduce/format.h.
//
// Thread safety: ApplyBatch/Clear run on one thread at a time and own the
// batch scratch members below. Query, RowCount, DiskBytes and
// LastAppliedEtag may run concurrently from any thread: they use their own
// LMDB read transactions (MDB_NOTLS) or the atomic etag.
#pragma once

#include <lmdb.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/lmdb_util.h"
#include "mapreduce/definition.h"
#include "mapreduce/mapreduce_index.h"

namespace corvid::mapreduce {

// Sum/avg partial state: exact integer sum, double sum, input counts.
struct SumState {
  __int128 isum = 0;
  double dsum = 0;
  double dcomp = 0;  // what dsum's roundings lost (AddCompensated)
  int64_t n = 0;     // numeric inputs
  int64_t nd = 0;    // double inputs
};

// Adds x to the compensated sum (sum, comp) (Neumaier's variant of Kahan
// summation): sum + comp stays within a rounding or two of the exact sum
// whatever the order of additions and removals, so a group's sum after
// updates and deletes equals a fresh sum of what is left (1e17 + 1.5 -
// 1e17 is 1.5, not 0), as CouchDB and RavenDB users, whose reduces are
// recomputed, expect.
inline void AddCompensated(double& sum, double& comp, double x) {
  const double t = sum + x;
  comp += std::fabs(sum) >= std::fabs(x) ? (sum - t) + x : (x - t) + sum;
  sum = t;
}

// Adds `b` into `a`: a batch's deltas into a row, or rows rolled up.
inline void AddSums(SumState& a, const SumState& b) {
  a.isum += b.isum;
  a.n += b.n;
  a.nd += b.nd;
  AddCompensated(a.dsum, a.dcomp, b.dsum);
  AddCompensated(a.dsum, a.dcomp, b.dcomp);
}

// A sum/avg reducer's part of a row (format.h, RowValue), unaligned.
inline constexpr size_t kSumSlotBytes = 48;
inline SumState LoadSum(const char* slot) {
  SumState s;
  std::memcpy(&s.isum, slot, 16);
  std::memcpy(&s.dsum, slot + 16, 8);
  std::memcpy(&s.n, slot + 24, 8);
  std::memcpy(&s.nd, slot + 32, 8);
  std::memcpy(&s.dcomp, slot + 40, 8);
  return s;
}
inline void StoreSum(char* slot, const SumState& s) {
  std::memcpy(slot, &s.isum, 16);
  std::memcpy(slot + 16, &s.dsum, 8);
  std::memcpy(slot + 24, &s.n, 8);
  std::memcpy(slot + 32, &s.nd, 8);
  std::memcpy(slot + 40, &s.dcomp, 8);
}

class MapReduceIndexImpl final : public MapReduceIndex {
 public:
  static Result<std::unique_ptr<MapReduceIndex>> OpenImpl(const std::string& dir,
                                                          std::shared_ptr<const DefinitionImpl> definition);
  ~MapReduceIndexImpl() override;

  uint64_t LastAppliedEtag() const override { return last_etag_.load(std::memory_order_acquire); }
  Status ApplyBatch(std::span<const DocChange> batch, uint64_t through_etag, std::vector<IndexError>& errors) override;

  void SetBeforeCommit(BeforeCommit hook) override { before_commit_ = std::move(hook); }
  Status Clear() override;
  std::string DamageFoundAtOpen() const override { return damage_; }
  uint64_t RowCount() const override;
  uint64_t DiskBytes() const override;
  Result<StateSnapshot> SnapshotFiles() const override;
  Result<QueryResult> Query(const std::vector<std::pair<std::string, std::string>>& params,
                            size_t max_response_bytes = SIZE_MAX) const override;

  // Row layout (format.h "RowValue"): byte offset of each reducer's state.
  size_t row_bytes() const { return row_bytes_; }
  size_t reducer_offset(size_t r) const { return red_offset_[r]; }

 private:
  // MapDocument into mapped_ (false: err_ says why), a thrown fault included.
  bool MapGuarded(const DocChange& ch);

  BeforeCommit before_commit_;
  MapReduceIndexImpl() = default;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  struct RowDelta {
    int64_t count = 0;
    bool minmax_dirty = false;
  };

  Status ApplyEntries(MDB_txn* txn, std::string_view record, int sign);
  Status BumpMinMax(MDB_txn* txn, size_t reducer, std::string_view key, const NumInput& in, int sign);
  Status FlushDeltas(MDB_txn* txn);
  Status RecomputeMinMax(MDB_txn* txn, size_t reducer, std::string_view key, char* slot);
  uint32_t DeltaIndex(std::string_view key);

  std::shared_ptr<const DefinitionImpl> def_;
  MDB_env* env_ = nullptr;
  MDB_dbi meta_ = 0, rows_ = 0, docs_ = 0, minmax_ = 0;
  std::atomic<uint64_t> last_etag_{0};
  std::string damage_;  // OpenImpl: why it wiped the state, if it did
  size_t row_bytes_ = 8;
  std::vector<size_t> red_offset_;
  bool has_minmax_ = false;

  // Batch scratch (ApplyBatch thread only).
  MapScratch scratch_;
  MappedDoc mapped_;
  std::string doc_key_, old_rec_, new_rec_, mm_key_, row_buf_, err_, warn_;
  std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> delta_index_;
  std::vector<std::string_view> delta_keys_;
  std::vector<RowDelta> deltas_;
  std::vector<SumState> sum_deltas_;  // deltas_.size() x numeric reducers
};

// Encodes `mapped` as a DocRecord (format.h) into *out; empty when it has no
// entries.
void EncodeDocRecord(const MappedDoc& mapped, size_t numeric_reducers, std::string* out);

Status LmdbFailure(int rc, std::string_view what);  // common/lmdb_util.h's LmdbStatus, named

}  // namespace corvid::mapreduce
