//===- CacBase.td - The cac dialect, its enums and types ---*- tablegen -*-===//

#ifndef CAC_BASE_TD
#define CAC_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Cac_Dialect : Dialect {
  let name = "cac";
  let cppNamespace = "::cac::ir";
  let summary = "Credit assignment over the domains of a rollout batch";
  let description = [{
    The `cac` dialect mirrors the primitives of the cac language. Every value
    is a *field* over one domain of the rollout batch (token, seg, seq, group,
    node, batch for one value of the whole batch, or scalar for parameters
    and literals). Elementwise operations take
    operands of one domain; `cac.broadcast` moves a value to a finer domain and
    `cac.reduce` to a coarser one. Scans and shifts run along the tokens of
    each sequence. The `cac-partition` pass groups operations into
    `cac.kernel`s that one launch each can run.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
}

def Cac_Domain : I32EnumAttr<"Domain", "index space of a value", [
    I32EnumAttrCase<"Scalar", 0, "scalar">,
    I32EnumAttrCase<"Token", 1, "token">,
    I32EnumAttrCase<"Seg", 2, "seg">,
    I32EnumAttrCase<"Seq", 3, "seq">,
    I32EnumAttrCase<"Group", 4, "group">,
    I32EnumAttrCase<"Node", 5, "node">,
    I32EnumAttrCase<"Batch", 6, "batch">]> {
  let cppNamespace = "::cac::ir";
  let genSpecializedAttr = 0;
}
def Cac_DomainAttr : EnumAttr<Cac_Dialect, Cac_Domain, "domain">;

def Cac_BinaryKind : I32EnumAttr<"BinaryKind", "elementwise binary operation", [
    I32EnumAttrCase<"Add", 0, "add">,
    I32EnumAttrCase<"Sub", 1, "sub">,
    I32EnumAttrCase<"Mul", 2, "mul">,
    I32EnumAttrCase<"Div", 3, "div">,
    I32EnumAttrCase<"Min", 4, "min">,
    I32EnumAttrCase<"Max", 5, "max">,
    I32EnumAttrCase<"Pow", 6, "pow">,
    I32EnumAttrCase<"And", 7, "and">,
    I32EnumAttrCase<"Or", 8, "or">,
    I32EnumAttrCase<"Mod", 9, "mod">]> {
  let cppNamespace = "::cac::ir";
  let genSpecializedAttr = 0;
}
def Cac_BinaryKindAttr : EnumAttr<Cac_Dialect, Cac_BinaryKind, "binary_kind">;

def Cac_UnaryKind : I32EnumAttr<"UnaryKind", "elementwise unary operation", [
    I32EnumAttrCase<"Neg", 0, "neg">,
    I32EnumAttrCase<"Exp", 1, "exp">,
    I32EnumAttrCase<"Log", 2, "log">,
    I32EnumAttrCase<"Sqrt", 3, "sqrt">,
    I32EnumAttrCase<"Abs", 4, "abs">,
    I32EnumAttrCase<"Sigmoid", 5, "sigmoid">,
    I32EnumAttrCase<"Not", 6, "not">,
    I32EnumAttrCase<"Floor", 7, "floor">,
    I32EnumAttrCase<"Ceil", 8, "ceil">,
    I32EnumAttrCase<"StopGrad", 9, "stop_gradient">]> {
  let cppNamespace = "::cac::ir";
  let genSpecializedAttr = 0;
}
def Cac_UnaryKindAttr : EnumAttr<Cac_Dialect, Cac_UnaryKind, "unary_kind">;

def Cac_CmpPredicate : I32EnumAttr<"CmpPredicate", "comparison", [
    I32EnumAttrCase<"LT", 0, "lt">,
    I32EnumAttrCase<"LE", 1, "le">,
    I32EnumAttrCase<"GT", 2, "gt">,
    I32EnumAttrCase<"GE", 3, "ge">,
    I32EnumAttrCase<"EQ", 4, "eq">,
    I32EnumAttrCase<"NE", 5, "ne">]> {
  let cppNamespace = "::cac::ir";
  let genSpecializedAttr = 0;
}
def Cac_CmpPredicateAttr : EnumAttr<Cac_Dialect, Cac_CmpPredicate, "cmp_predicate">;

def Cac_ReduceKind : I32EnumAttr<"ReduceKind", "reduction", [
    I32EnumAttrCase<"Sum", 0, "sum">,
    I32EnumAttrCase<"Mean", 1, "mean">,
    I32EnumAttrCase<"Min", 2, "min">,
    I32EnumAttrCase<"Max", 3, "max">,
    I32EnumAttrCase<"First", 4, "first">,
    I32EnumAttrCase<"Last", 5, "last">,
    I32EnumAttrCase<"Count", 6, "count">,
    I32EnumAttrCase<"Var", 7, "var">,
    I32EnumAttrCase<"Std", 8, "std">,
    I32EnumAttrCase<"VarUnbiased", 9, "var_unbiased">,
    I32EnumAttrCase<"StdUnbiased", 10, "std_unbiased">]> {
  let cppNamespace = "::cac::ir";
  let genSpecializedAttr = 0;
}
def Cac_ReduceKindAttr : EnumAttr<Cac_Dialect, Cac_ReduceKind, "reduce_kind">;

def Cac_PathReduceKind : I32EnumAttr<"PathReduceKind", "seq -> node reduction", [
    I32EnumAttrCase<"LeafMean", 0, "leaf_mean">,
    I32EnumAttrCase<"SubtreeMean", 1, "subtree_mean">,
    I32EnumAttrCase<"SubtreeMax", 2, "subtree_max">,
    I32EnumAttrCase<"SubtreeSum", 3, "subtree_sum">]> {
  let cppNamespace = "::cac::ir";
  let genSpecializedAttr = 0;
}
def Cac_PathReduceKindAttr
    : EnumAttr<Cac_Dialect, Cac_PathReduceKind, "path_reduce_kind">;

def Cac_FieldType : TypeDef<Cac_Dialect, "Field"> {
  let mnemonic = "field";
  let summary = "a value over one domain of the batch";
  let description = [{
    `!cac.field<token, f32>` holds one f32 per token of the batch;
    `!cac.field<seq, i1>` one predicate per sequence. Scalars (parameters and
    literals) have the domain `scalar`.
  }];
  let parameters = (ins EnumParameter<Cac_Domain>:$domain,
                        "::mlir::Type":$elementType);
  let assemblyFormat = "`<` $domain `,` $elementType `>`";
  let genVerifyDecl = 1;
}

def Cac_Field : Type<CPred<"::llvm::isa<::cac::ir::FieldType>($_self)">,
                     "cac field", "::cac::ir::FieldType">;

class Cac_Op<string mnemonic, list<Trait> traits = []>
    : Op<Cac_Dialect, mnemonic, traits>;

#endif // CAC_BASE_TD
