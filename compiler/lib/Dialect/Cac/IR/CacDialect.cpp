//===- CacDialect.cpp - The cac dialect: types, attributes, verifiers -----===//

#include "cac/Dialect/Cac/IR/CacDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace cac::ir;

#include "cac/Dialect/Cac/IR/CacDialect.cpp.inc"
#include "cac/Dialect/Cac/IR/CacEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "cac/Dialect/Cac/IR/CacAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "cac/Dialect/Cac/IR/CacTypes.cpp.inc"

void CacDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "cac/Dialect/Cac/IR/CacOps.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "cac/Dialect/Cac/IR/CacTypes.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "cac/Dialect/Cac/IR/CacAttrs.cpp.inc"
      >();
}

// toAbi/fromAbi cast between the dialect's domains and the ABI's.
#define CAC_SAME_DOMAIN(D)                                                     \
  static_assert(static_cast<uint32_t>(Domain::D) ==                            \
                    static_cast<uint32_t>(cac::abi::Domain::D),                \
                "the dialect's and the ABI's " #D " domain differ");
CAC_SAME_DOMAIN(Scalar)
CAC_SAME_DOMAIN(Token)
CAC_SAME_DOMAIN(Seg)
CAC_SAME_DOMAIN(Seq)
CAC_SAME_DOMAIN(Group)
CAC_SAME_DOMAIN(Node)
CAC_SAME_DOMAIN(Batch)
#undef CAC_SAME_DOMAIN

LogicalResult FieldType::verify(function_ref<InFlightDiagnostic()> emitError,
                                Domain domain, Type elementType) {
  if (!elementType.isF32() && !elementType.isF64() &&
      !elementType.isInteger(1) && !elementType.isInteger(32))
    return emitError() << "field elements must be f32, f64, i1 or i32, not "
                       << elementType;
  return success();
}

static FieldType fieldOf(Value v) { return cast<FieldType>(v.getType()); }
static bool isFloatField(Value v) {
  return isa<FloatType>(fieldOf(v).getElementType());
}
static bool isPredField(Value v) {
  return fieldOf(v).getElementType().isInteger(1);
}

LogicalResult InputOp::verify() {
  Domain d = getResult().getType().getDomain();
  if (d == Domain::Scalar)
    return emitOpError("an input cannot be a scalar; use cac.param");
  return success();
}

LogicalResult ParamOp::verify() {
  FieldType t = getResult().getType();
  if (t.getDomain() != Domain::Scalar || !isa<FloatType>(t.getElementType()))
    return emitOpError("a parameter is a scalar number");
  return success();
}

LogicalResult OutputOp::verify() {
  if (fieldOf(getValue()).getDomain() == Domain::Scalar)
    return emitOpError("an output must have a domain; broadcast it first");
  return success();
}

static LogicalResult verifyNodeNumbers(Operation *op, ValueRange vs) {
  for (Value v : vs)
    if (fieldOf(v).getDomain() != Domain::Node || !isFloatField(v))
      return op->emitOpError("operates on numbers of the node domain");
  return success();
}

LogicalResult NumChildrenOp::verify() {
  return verifyNodeNumbers(*this, getOperation()->getResults());
}

LogicalResult ParentOp::verify() {
  return verifyNodeNumbers(*this, getOperation()->getOperands());
}

LogicalResult ChildMeanOp::verify() {
  return verifyNodeNumbers(*this, getOperation()->getOperands());
}

LogicalResult TreeMeanOp::verify() {
  return verifyNodeNumbers(*this, getOperation()->getOperands());
}

LogicalResult PathReduceOp::verify() {
  if (fieldOf(getOperand()).getDomain() != Domain::Seq ||
      !isFloatField(getOperand()))
    return emitOpError("reduces numbers of the seq domain");
  if (getResult().getType().getDomain() != Domain::Node ||
      getResult().getType().getElementType() !=
          fieldOf(getOperand()).getElementType())
    return emitOpError("the result is a node field of the operand's type");
  return success();
}

LogicalResult RankOp::verify() {
  if (fieldOf(getInput()).getDomain() != Domain::Token ||
      !isFloatField(getInput()))
    return emitOpError("ranks the numbers of a token field");
  return success();
}

LogicalResult GroupRankOp::verify() {
  if (fieldOf(getInput()).getDomain() != Domain::Seq ||
      !isFloatField(getInput()))
    return emitOpError("ranks the numbers of a seq field");
  return success();
}

LogicalResult GroupKeyOp::verify() {
  if (fieldOf(getInput()).getDomain() != Domain::Seq ||
      !isFloatField(getInput()))
    return emitOpError("reduces the numbers of a seq field");
  ReduceKind k = getKind();
  if (k != ReduceKind::Sum && k != ReduceKind::Mean && k != ReduceKind::Count)
    return emitOpError("kind must be sum, mean or count");
  return success();
}

LogicalResult GroupPosSumOp::verify() {
  if (fieldOf(getInput()).getDomain() != Domain::Token ||
      !isFloatField(getInput()))
    return emitOpError("sums the numbers of a token field");
  return success();
}

LogicalResult BatchKthOp::verify() {
  Domain k = fieldOf(getCount()).getDomain();
  if (fieldOf(getInput()).getDomain() != Domain::Token ||
      !isFloatField(getInput()) || !isFloatField(getCount()) ||
      (k != Domain::Scalar && k != Domain::Batch) ||
      fieldOf(getResult()).getDomain() != Domain::Batch ||
      !isFloatField(getResult()))
    return emitOpError("takes the numbers of a token field and a scalar or "
                       "batch count, and gives a batch number");
  return success();
}

LogicalResult BatchTopKOp::verify() {
  if (fieldOf(getInput()).getDomain() != Domain::Token ||
      !isFloatField(getInput()) ||
      fieldOf(getKth()).getDomain() != Domain::Batch ||
      fieldOf(getResult()).getDomain() != Domain::Token ||
      !fieldOf(getResult()).getElementType().isInteger(1))
    return emitOpError("flags a token field's tokens from a batch index "
                       "(a cac.batch_kth of it), as a token predicate");
  return success();
}

LogicalResult UniformOp::verify() {
  if (fieldOf(getSeed()).getDomain() != Domain::Scalar ||
      !isFloatField(getSeed()) ||
      fieldOf(getResult()).getDomain() != Domain::Token ||
      !isFloatField(getResult()))
    return emitOpError("takes a scalar seed and gives token numbers");
  return success();
}

LogicalResult SegGatherOp::verify() {
  if (fieldOf(getInput()).getDomain() != Domain::Seg ||
      !getInput().getDefiningOp<InputOp>())
    return emitOpError("gathers from an input of the seg domain");
  if (fieldOf(getIndex()).getDomain() != Domain::Token || !isFloatField(getIndex()))
    return emitOpError("the index is a token number (the segment id)");
  if (getResult().getType().getDomain() != Domain::Token ||
      getResult().getType().getElementType() !=
          fieldOf(getInput()).getElementType())
    return emitOpError("the result is a token field of the input's type");
  return success();
}

LogicalResult KernelOp::verify() {
  Domain g = getGrid();
  if (g != Domain::Seq && g != Domain::Group && g != Domain::Node &&
      g != Domain::Batch)
    return emitOpError("grid must be seq, group, node or batch");
  auto yield = cast<YieldOp>(getBody().front().getTerminator());
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("yielded types do not match the results");
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

LogicalResult ConstantOp::verify() {
  FieldType t = getResult().getType();
  if (t.getDomain() != Domain::Scalar)
    return emitOpError("a constant is a scalar");
  if (cast<TypedAttr>(getValue()).getType() != t.getElementType())
    return emitOpError("value type does not match the element type");
  return success();
}

LogicalResult BinaryOp::verify() {
  bool logical =
      getKind() == BinaryKind::And || getKind() == BinaryKind::Or;
  if (logical != isPredField(getLhs()))
    return emitOpError(logical ? "and/or take predicates"
                               : "arithmetic takes numbers");
  return success();
}

LogicalResult UnaryOp::verify() {
  bool logical = getKind() == UnaryKind::Not;
  if (logical != isPredField(getOperand()))
    return emitOpError(logical ? "not takes a predicate"
                               : "arithmetic takes numbers");
  return success();
}

LogicalResult CmpOp::verify() {
  FieldType r = getResult().getType();
  if (!isFloatField(getLhs()))
    return emitOpError("compares numbers");
  if (!r.getElementType().isInteger(1) ||
      r.getDomain() != fieldOf(getLhs()).getDomain())
    return emitOpError("result must be a predicate of the operands' domain");
  return success();
}

LogicalResult SelectOp::verify() {
  FieldType c = fieldOf(getCondition());
  FieldType r = getResult().getType();
  if (!c.getElementType().isInteger(1))
    return emitOpError("condition must be a predicate");
  if (getTrueValue().getType() != r || getFalseValue().getType() != r ||
      c.getDomain() != r.getDomain())
    return emitOpError("operands must share the result's type and domain");
  return success();
}

LogicalResult CastOp::verify() {
  FieldType in = fieldOf(getOperand()), out = getResult().getType();
  if (!in.getElementType().isInteger(1) ||
      !isa<FloatType>(out.getElementType()) ||
      in.getDomain() != out.getDomain())
    return emitOpError("casts a predicate to a number of the same domain");
  return success();
}

LogicalResult BroadcastOp::verify() {
  FieldType in = fieldOf(getOperand()), out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("cannot change the element type");
  if (!cac::ir::broadcastsTo(in.getDomain(), out.getDomain()))
    return emitOpError("cannot broadcast from ")
           << stringifyDomain(in.getDomain()) << " to "
           << stringifyDomain(out.getDomain());
  return success();
}

OpFoldResult BroadcastOp::fold(FoldAdaptor) {
  if (getOperand().getType() == getResult().getType())
    return getOperand();
  return {};
}

LogicalResult PositionOp::verify() {
  if (getResult().getType().getDomain() != Domain::Token ||
      !isa<FloatType>(getResult().getType().getElementType()))
    return emitOpError("is a token number");
  return success();
}

LogicalResult LengthOp::verify() {
  if (getResult().getType().getDomain() != Domain::Seq ||
      !isa<FloatType>(getResult().getType().getElementType()))
    return emitOpError("is a seq number");
  return success();
}

LogicalResult ShiftOp::verify() {
  FieldType t = fieldOf(getOperand());
  if (t.getDomain() != Domain::Token && t.getDomain() != Domain::Seg)
    return emitOpError("shifts along token or seg values");
  if (getFill().getType() != t || getResult().getType() != t)
    return emitOpError("fill and result must have the operand's type");
  int64_t offset = static_cast<int64_t>(getOffset());
  if (offset != 1 && offset != -1)
    return emitOpError("offset must be 1 or -1");
  return success();
}

LogicalResult ScanOp::verify() {
  FieldType t = fieldOf(getInput());
  if (t.getDomain() != Domain::Token && t.getDomain() != Domain::Seg)
    return emitOpError("scans along token or seg values");
  if (!isFloatField(getInput()) || getDecay().getType() != t ||
      getResult().getType() != t)
    return emitOpError("input, decay and result must be numbers of one type");
  return success();
}

LogicalResult ReduceOp::verify() {
  Domain in = fieldOf(getOperand()).getDomain();
  Domain out = getResult().getType().getDomain();
  bool ok =
      (in == Domain::Token && (out == Domain::Seq || out == Domain::Seg)) ||
      (in == Domain::Seq && (out == Domain::Group || out == Domain::Batch));
  if (!ok)
    return emitOpError("cannot reduce from ")
           << stringifyDomain(in) << " to " << stringifyDomain(out);
  ReduceKind k = getKind();
  bool stat = k == ReduceKind::Var || k == ReduceKind::Std ||
              k == ReduceKind::VarUnbiased || k == ReduceKind::StdUnbiased;
  if (stat && out != Domain::Group && out != Domain::Batch)
    return emitOpError(
        "variance and std reduce seq values over a group or the batch");
  if (!isFloatField(getOperand()) ||
      fieldOf(getOperand()).getElementType() !=
          getResult().getType().getElementType())
    return emitOpError("reduces numbers to numbers of the same type");
  return success();
}

#define GET_OP_CLASSES
#include "cac/Dialect/Cac/IR/CacOps.cpp.inc"
