//===- Abi.cpp - The fixed kernel arguments -------------------------------===//

#include "Abi.h"

namespace cac::lowering {

const char *const kFixedNames[kNumFixed] = {
    "unit_begin",    "unit_end",      "num_seqs",    "num_groups",
    "num_tokens",    "num_nodes",     "seq_offsets", "seq_group",
    "group_offsets", "group_members", "node_parent", "token_node"};

} // namespace cac::lowering
