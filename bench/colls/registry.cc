#include "bench/coll_spec.h"

namespace ciuic {

const std::vector<const CollSpec*>& AllCollectives() {
  static const std::vector<const CollSpec*> all = {&kAllReduceSpec, &kAllGatherSpec, &kReduceScatterSpec,
                                                   &kBroadcastSpec, &kReduceSpec,    &kAllToAllSpec,
                                                   &kSendRecvSpec};
  return all;
}

const CollSpec* FindCollective(std::string_view name) {
  for (const CollSpec* s : AllCollectives()) {
    if (name == s->name) return s;
  }
  return nullptr;
}

PatternKind PatternFor(const CollSpec& spec, ReduceOp op) {
  if (!spec.reduces) return PatternKind::kAny;
  return op == ReduceOp::kProd                            ? PatternKind::kProd
         : (op == ReduceOp::kMin || op == ReduceOp::kMax) ? PatternKind::kAny
                                                          : PatternKind::kSum;
}

}  // namespace ciuic
