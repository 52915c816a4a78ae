// The first step of a search index's write path: one stored document into
// the batch's segment builder, as the definition says. Its stored fields,
// if the definition keeps any in segments (rendered once, as a hit returns
// them), each text field's tokens (all its
// values, kArrayPositionGap apart), each number or date field's values.
// The rest of the write path: SegmentBuilder (segment.h) holds the batch,
// the encoder writes it (segment_format.h), SearchIndexImpl commits it
// (search_index.cc).
#pragma once

#include <vector>

#include "common/doc_change.h"
#include "common/status.h"
#include "postings/definition.h"
#include "postings/segment.h"

namespace corvid::postings {

// A value the definition cannot take (an object where text is expected, a
// string where a number is) and a document that is not a JSON object are
// appended to `errors` and skipped, never a failure: the batch goes on. A
// returned error is one the whole batch must stop for.
Status AddDocument(SegmentBuilder& b, const SearchDefinitionImpl& def, const DocChange& c,
                   std::vector<IndexError>& errors);

}  // namespace corvid::postings
