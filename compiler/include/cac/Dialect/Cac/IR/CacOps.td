//===- CacOps.td - Operations of the cac dialect ------------*- tablegen -*-===//

#ifndef CAC_OPS_TD
#define CAC_OPS_TD

include "cac/Dialect/Cac/IR/CacBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/OpBase.td"

//===----------------------------------------------------------------------===//
// Structure
//===----------------------------------------------------------------------===//

def Cac_EstimatorOp : Cac_Op<"estimator", [
    Symbol, IsolatedFromAbove, NoTerminator, SingleBlock]> {
  let summary = "one estimator: its inputs, parameters, computation, outputs";
  let description = [{
    The body declares inputs with `cac.input`, parameters with `cac.param`,
    computes with the other `cac` operations and names results with
    `cac.output`. The order of outputs is the order of the manifest.

    ```mlir
    cac.estimator @gae {
      %v = cac.input "value" : !cac.field<token, f32>
      %g = cac.param "gamma" default 1.0 : !cac.field<scalar, f32>
      ...
      cac.output "adv" %a : !cac.field<token, f32>
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
  let extraClassDeclaration = [{
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
  }];
}

def Cac_InputOp : Cac_Op<"input", [Pure]> {
  let summary = "an input of the estimator, read from the batch";
  let description = [{
    `%v = cac.input "value" : !cac.field<token, f32>` is the batch's token
    array `value`. The input named `group` of domain `seq` is the grouping key
    and is never read as a number.
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cac_ParamOp : Cac_Op<"param", [Pure]> {
  let summary = "a scalar parameter, set at run time";
  let description = [{
    `%p = cac.param "lambda" default 0.95 : !cac.field<scalar, f32>`.
    Without `default` the caller must give a value. Parameters are kernel
    arguments, so changing one needs no recompilation.
  }];
  let arguments = (ins StrAttr:$name, OptionalAttr<F64Attr>:$default_value);
  let results = (outs Cac_Field:$result);
  let assemblyFormat =
      "$name (`default` $default_value^)? attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cac_OutputOp : Cac_Op<"output"> {
  let summary = "names a result of the estimator";
  let description = [{
    `cac.output "adv" %a : !cac.field<token, f32>` writes `%a` to the output
    array `adv`, of the domain of `%a`.
  }];
  let arguments = (ins StrAttr:$name, Cac_Field:$value);
  let assemblyFormat = "$name $value attr-dict `:` type($value)";
  let hasVerifier = 1;
}

def Cac_KernelOp : Cac_Op<"kernel", [SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "operations that one kernel launch computes";
  let description = [{
    Created by `cac-partition`. A kernel runs one unit of its `grid` domain
    (`seq`: a sequence with all its tokens; `group`: a group of sequences;
    `batch`: its one unit, all the sequences) per thread. Values yielded by a kernel are stored in scratch buffers and read
    by later kernels.

    ```mlir
    %m = cac.kernel group 1 {
      %s = cac.reduce mean %r : !cac.field<seq, f32> -> !cac.field<group, f32>
      cac.yield %s : !cac.field<group, f32>
    } : !cac.field<group, f32>
    ```
  }];
  let arguments = (ins Cac_DomainAttr:$grid, I64Attr:$index);
  let results = (outs Variadic<Cac_Field>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat =
      "$grid $index attr-dict-with-keyword $body (`:` type($results)^)?";
  let hasVerifier = 1;
}

def Cac_YieldOp : Cac_Op<"yield", [Pure, Terminator, HasParent<"KernelOp">]> {
  let summary = "the values a kernel hands to later kernels";
  let arguments = (ins Variadic<Cac_Field>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
  let builders = [OpBuilder<(ins), [{ build($_builder, $_state, {}); }]>];
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

def Cac_ConstantOp : Cac_Op<"constant", [Pure, ConstantLike]> {
  let summary = "a literal";
  let description = [{
    `%c = cac.constant 0.5 : !cac.field<scalar, f32>`; predicates use
    `true`/`false` with element type i1.
  }];
  let arguments = (ins TypedAttrInterface:$value);
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
  let hasFolder = 1;
  let hasVerifier = 1;
}

def Cac_BinaryOp : Cac_Op<"binary", [Pure, SameOperandsAndResultType]> {
  let summary = "elementwise binary arithmetic or logic";
  let description = [{
    `%c = cac.binary add %a, %b : !cac.field<token, f32>`. Operands have one
    domain; `cac.broadcast` makes them so. `and`/`or` take predicates.
  }];
  let arguments = (ins Cac_BinaryKindAttr:$kind, Cac_Field:$lhs, Cac_Field:$rhs);
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "$kind $lhs `,` $rhs attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cac_UnaryOp : Cac_Op<"unary", [Pure, SameOperandsAndResultType]> {
  let summary = "elementwise unary function";
  let description = [{
    `%e = cac.unary exp %x : !cac.field<token, f32>`; `not` takes a predicate.
  }];
  let arguments = (ins Cac_UnaryKindAttr:$kind, Cac_Field:$operand);
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "$kind $operand attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cac_CmpOp : Cac_Op<"cmp", [Pure, SameTypeOperands]> {
  let summary = "elementwise comparison giving a predicate";
  let description = [{
    `%p = cac.cmp lt %a, %b : !cac.field<token, f32> -> !cac.field<token, i1>`
  }];
  let arguments = (ins Cac_CmpPredicateAttr:$predicate, Cac_Field:$lhs,
                       Cac_Field:$rhs);
  let results = (outs Cac_Field:$result);
  let assemblyFormat =
      "$predicate $lhs `,` $rhs attr-dict `:` type($lhs) `->` type($result)";
  let hasVerifier = 1;
}

def Cac_SelectOp : Cac_Op<"select", [Pure, AllTypesMatch<["true_value", "false_value", "result"]>]> {
  let summary = "elementwise choice";
  let description = [{
    `%r = cac.select %c, %a, %b : !cac.field<token, i1>, !cac.field<token, f32>`
  }];
  let arguments = (ins Cac_Field:$condition, Cac_Field:$true_value,
                       Cac_Field:$false_value);
  let results = (outs Cac_Field:$result);
  let assemblyFormat = [{
    $condition `,` $true_value `,` $false_value attr-dict `:`
    type($condition) `,` type($result)
  }];
  let hasVerifier = 1;
}

def Cac_CastOp : Cac_Op<"cast", [Pure]> {
  let summary = "predicate to number (1 or 0)";
  let arguments = (ins Cac_Field:$operand);
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "$operand attr-dict `:` type($operand) `->` type($result)";
  let hasVerifier = 1;
}

def Cac_BroadcastOp : Cac_Op<"broadcast", [Pure]> {
  let summary = "moves a value to a finer domain";
  let description = [{
    `%t = cac.broadcast %r : !cac.field<seq, f32> -> !cac.field<token, f32>`
    gives every token the value of its sequence (group -> seq through the
    sequence's group; scalar -> anything).
  }];
  let arguments = (ins Cac_Field:$operand);
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "$operand attr-dict `:` type($operand) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Along the tokens of a sequence
//===----------------------------------------------------------------------===//

def Cac_PositionOp : Cac_Op<"position", [Pure]> {
  let summary = "the index of each token inside its sequence (0-based)";
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cac_LengthOp : Cac_Op<"length", [Pure]> {
  let summary = "the number of tokens of each sequence";
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cac_ShiftOp : Cac_Op<"shift", [Pure, AllTypesMatch<["operand", "fill", "result"]>]> {
  let summary = "the value of a neighbouring token of the same sequence";
  let description = [{
    `%n = cac.shift %v by 1 fill %z : !cac.field<token, f32>` is `v[t+1]`, or
    `z[t]` past the end of the sequence (`next(v, z)` in the language);
    `by -1` is `prev`.
  }];
  let arguments = (ins Cac_Field:$operand, I64Attr:$offset, Cac_Field:$fill);
  let results = (outs Cac_Field:$result);
  let assemblyFormat =
      "$operand `by` $offset `fill` $fill attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cac_ScanOp : Cac_Op<"scan", [Pure, AllTypesMatch<["input", "decay", "result"]>]> {
  let summary = "linear recurrence along each sequence";
  let description = [{
    Forward: `y[t] = x[t] + c[t] * y[t-1]`, `y[-1] = 0`.
    With `reverse`: `y[t] = x[t] + c[t] * y[t+1]`, `y[T] = 0` (GAE, SAE).

    ```mlir
    %a = cac.scan reverse %delta, %c : !cac.field<token, f32>
    ```
  }];
  let arguments = (ins Cac_Field:$input, Cac_Field:$decay, UnitAttr:$reverse);
  let results = (outs Cac_Field:$result);
  let assemblyFormat =
      "(`reverse` $reverse^)? $input `,` $decay attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cac_RankOp : Cac_Op<"rank", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "descending rank of each token's value inside its sequence";
  let description = [{
    `rank[t]` is the number of tokens `u` of the same sequence with
    `x[u] > x[t]`, or `x[u] == x[t]` and `u < t`: 0 for the largest value,
    ties broken by the lower index, so the ranks of a sequence are a
    permutation of 0..T-1. `top_k(x, k)` in the language is `rank(x) < k`
    (SAPO's top-k% entropy boundaries).

    ```mlir
    %r = cac.rank %h : !cac.field<token, f32>
    ```
  }];
  let arguments = (ins Cac_Field:$input);
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cac_GroupRankOp : Cac_Op<"group_rank", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "descending rank of each sequence's value inside its group";
  let description = [{
    `group_rank[i]` is the number of sequences `j` of the same group with
    `x[j] > x[i]`, or `x[j] == x[i]` and `j < i`: 0 for the largest value,
    ties broken by the lower sequence index, so the ranks of a group are a
    permutation of 0..n-1. It reads its operand at the other sequences of
    the group, so the operand comes from an earlier kernel (cac-partition).

    ```mlir
    %r = cac.group_rank %x : !cac.field<seq, f64>
    ```
  }];
  let arguments = (ins Cac_Field:$input);
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cac_GroupKeyOp : Cac_Op<"group_key", [Pure, AllTypesMatch<["input", "key", "result"]>]> {
  let summary = "sum, mean or count over the group's sequences with an equal key";
  let description = [{
    For sequence `i`, over the sequences `j` of its group with
    `key[j] == key[i]` (and `j == i`, so a NaN key matches itself): the sum
    of `x[j]`, their mean (`x[i] + sum (x[j] - x[i]) / n`, exact over equal
    values) or their number n (`count`, which ignores `x`). It reads its
    operands at the other sequences of the group, so they come from an
    earlier kernel (cac-partition).

    ```mlir
    %m = cac.group_key mean %x, %key : !cac.field<seq, f64>
    ```
  }];
  let arguments = (ins Cac_ReduceKindAttr:$kind, Cac_Field:$input,
                       Cac_Field:$key);
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "$kind $input `,` $key attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cac_GroupPosSumOp : Cac_Op<"group_pos_sum", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "sum over the group's tokens at each token's position";
  let description = [{
    At token `t` (0-based position) of sequence `i`: the sum of `x` at
    position `t` of every sequence of `i`'s group that has a token there
    (`i` included). Linear, and its own adjoint: the gradient of a loss
    through it is `group_pos_sum` of the incoming gradient. It reads its
    operand at the other sequences of the group, so the operand comes from
    an earlier kernel (cac-partition).

    ```mlir
    %s = cac.group_pos_sum %x : !cac.field<token, f64>
    ```
  }];
  let arguments = (ins Cac_Field:$input);
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cac_BatchKthOp : Cac_Op<"batch_kth", [Pure]> {
  let summary = "where the k largest tokens of the batch end";
  let description = [{
    Orders the batch's tokens by `x` descending (NaN above +inf, -0.0 equal
    to 0.0), ties by the lower token index (sequence, then position), and
    returns the token index of the k-th of that order, as a float; -1 when
    k is 0. The count is rounded down and clamped to [0, N] (NaN: 0).
    `cac.batch_top_k` turns it into the flags. It reads every token of its
    operand, so the operand comes from an earlier kernel (cac-partition),
    and it runs in a batch kernel (docs/language.md, `batch_top_k`).

    ```mlir
    %f = cac.batch_kth %x, %k : !cac.field<token, f64>, !cac.field<scalar, f64> -> !cac.field<batch, f64>
    ```
  }];
  let arguments = (ins Cac_Field:$input, Cac_Field:$count);
  let results = (outs Cac_Field:$result);
  let assemblyFormat =
      "$input `,` $count attr-dict `:` type($input) `,` type($count) `->` type($result)";
  let hasVerifier = 1;
}

def Cac_BatchTopKOp : Cac_Op<"batch_top_k", [Pure]> {
  let summary = "the batch's k largest tokens, from cac.batch_kth";
  let description = [{
    True at the tokens that come no later than token `kth` (a
    `cac.batch_kth` of the same operand) in the order of `cac.batch_kth`:
    `x[t] > x[kth]`, or `x[t] == x[kth]` and `t <= kth`; false everywhere
    when `kth` is -1. It reads its operand at token `kth`, so the operand
    comes from an earlier kernel.

    ```mlir
    %p = cac.batch_top_k %x, %f : !cac.field<token, f64>, !cac.field<batch, f64> -> !cac.field<token, i1>
    ```
  }];
  let arguments = (ins Cac_Field:$input, Cac_Field:$kth);
  let results = (outs Cac_Field:$result);
  let assemblyFormat =
      "$input `,` $kth attr-dict `:` type($input) `,` type($kth) `->` type($result)";
  let hasVerifier = 1;
}

def Cac_UniformOp : Cac_Op<"uniform", [Pure]> {
  let summary = "a uniform draw in [0, 1) per token, a hash of a seed";
  let description = [{
    At token position `t` (actions only) of sequence `i`: the splitmix64
    hash h of (seed, i, t) (docs/language.md, `uniform`), as
    `(h >> 11) * 2^-53` in f64 and `(h >> 40) * 2^-24` in f32. The seed is
    a scalar, truncated to an integer.

    ```mlir
    %u = cac.uniform %seed : !cac.field<scalar, f64> -> !cac.field<token, f64>
    ```
  }];
  let arguments = (ins Cac_Field:$seed);
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "$seed attr-dict `:` type($seed) `->` type($result)";
  let hasVerifier = 1;
}

def Cac_SegGatherOp : Cac_Op<"seg_gather", [Pure]> {
  let summary = "reads a per-segment input at each token's segment";
  let description = [{
    Segment values are represented on the tokens of their segment (every
    token holds its segment's value, docs/language.md). An input of the `seg`
    domain arrives as one value per segment of each sequence (segment j of
    sequence b at slot `seq_offsets[b] + j`, docs/bundle.md); `seg_gather`
    gives each token the value of segment `index` (the 0-based segment number
    of the token inside its sequence).

    ```mlir
    %v = cac.seg_gather %mc, %segid : !cac.field<seg, f32>, !cac.field<token, f32> -> !cac.field<token, f32>
    ```
  }];
  let arguments = (ins Cac_Field:$input, Cac_Field:$index);
  let results = (outs Cac_Field:$result);
  let assemblyFormat =
      "$input `,` $index attr-dict `:` type($input) `,` type($index) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

def Cac_ReduceOp : Cac_Op<"reduce", [Pure]> {
  let summary = "reduces a value to a coarser domain";
  let description = [{
    token -> seq (sum, mean, min, max, first, last, count), seq -> group and
    seq -> batch (the same, and var / std, population or unbiased; batch:
    over all the sequences of the batch).

    ```mlir
    %m = cac.reduce mean %r : !cac.field<seq, f32> -> !cac.field<group, f32>
    ```
  }];
  let arguments = (ins Cac_ReduceKindAttr:$kind, Cac_Field:$operand);
  let results = (outs Cac_Field:$result);
  let assemblyFormat =
      "$kind $operand attr-dict `:` type($operand) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Rollout trees (node domain)
//===----------------------------------------------------------------------===//

def Cac_NumChildrenOp : Cac_Op<"num_children", [Pure]> {
  let summary = "the number of children of each tree node";
  let description = [{
    Read from the batch's `node_parent` array; 0 for a leaf.

    ```mlir
    %n = cac.num_children : !cac.field<node, f32>
    ```
  }];
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cac_ParentOp : Cac_Op<"parent", [Pure, AllTypesMatch<["operand", "fill", "result"]>]> {
  let summary = "the value of each node's parent";
  let description = [{
    `v[parent(n)]`, or `fill[n]` for a root. It reads other nodes' values, so
    its operand is computed by an earlier kernel.

    ```mlir
    %p = cac.parent %v fill %z : !cac.field<node, f32>
    ```
  }];
  let arguments = (ins Cac_Field:$operand, Cac_Field:$fill);
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "$operand `fill` $fill attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cac_PathReduceOp : Cac_Op<"path_reduce", [Pure]> {
  let summary = "reduces per-sequence values onto the nodes of the tree";
  let description = [{
    Every sequence is a root-to-leaf path; its leaf is the node of its last
    token. `leaf_mean` averages the sequences that end at the node;
    `subtree_mean`, `subtree_max` and `subtree_sum` reduce the sequences whose
    leaf lies in the node's subtree (TreeAdv's node advantage). A node with
    no such sequence gets 0.

    ```mlir
    %a = cac.path_reduce subtree_mean %adv : !cac.field<seq, f32> -> !cac.field<node, f32>
    ```
  }];
  let arguments = (ins Cac_PathReduceKindAttr:$kind, Cac_Field:$operand);
  let results = (outs Cac_Field:$result);
  let assemblyFormat =
      "$kind $operand attr-dict `:` type($operand) `->` type($result)";
  let hasVerifier = 1;
}

def Cac_ChildMeanOp : Cac_Op<"child_mean", [Pure, AllTypesMatch<["operand", "result"]>]> {
  let summary = "the mean of a node value over each node's children";
  let description = [{
    0 for a leaf. The operand comes from an earlier kernel.

    ```mlir
    %m = cac.child_mean %v : !cac.field<node, f32>
    ```
  }];
  let arguments = (ins Cac_Field:$operand);
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "$operand attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cac_TreeMeanOp : Cac_Op<"tree_mean", [Pure, AllTypesMatch<["operand", "num_children", "result"]>]> {
  let summary = "bottom-up mean over the tree (SPO-tree's V)";
  let description = [{
    `y(n) = v(n)` at a leaf, else the mean of the children's `y`. Computed
    per node in closed form: the sum over the leaves `l` of n's subtree of
    `v(l)` times the product of `1 / num_children(a)` over the inner nodes
    `a` on the path from n down to l. `num_children` and `v` come from
    earlier kernels.

    ```mlir
    %V = cac.tree_mean %r, %nc : !cac.field<node, f32>
    ```
  }];
  let arguments = (ins Cac_Field:$operand, Cac_Field:$num_children);
  let results = (outs Cac_Field:$result);
  let assemblyFormat = "$operand `,` $num_children attr-dict `:` type($result)";
  let hasVerifier = 1;
}

#endif // CAC_OPS_TD
