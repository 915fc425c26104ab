// The verifiers of the cac dialect: one rejected operation per split.
//
// RUN: cac-opt %s -split-input-file -verify-diagnostics

cac.estimator @broadcast_coarser {
  %v = cac.input "value" : !cac.field<token, f32>
  // expected-error @+1 {{'cac.broadcast' op cannot broadcast from token to seq}}
  %s = cac.broadcast %v : !cac.field<token, f32> -> !cac.field<seq, f32>
}

// -----

cac.estimator @broadcast_sideways {
  %n = cac.input "n" : !cac.field<node, f32>
  // expected-error @+1 {{'cac.broadcast' op cannot broadcast from node to seq}}
  %s = cac.broadcast %n : !cac.field<node, f32> -> !cac.field<seq, f32>
}

// -----

cac.estimator @broadcast_element_type {
  %r = cac.input "reward" : !cac.field<seq, f32>
  // expected-error @+1 {{'cac.broadcast' op cannot change the element type}}
  %t = cac.broadcast %r : !cac.field<seq, f32> -> !cac.field<token, f64>
}

// -----

cac.estimator @reduce_token_to_group {
  %v = cac.input "value" : !cac.field<token, f32>
  // expected-error @+1 {{'cac.reduce' op cannot reduce from token to group}}
  %g = cac.reduce mean %v : !cac.field<token, f32> -> !cac.field<group, f32>
}

// -----

cac.estimator @reduce_to_finer {
  %r = cac.input "reward" : !cac.field<seq, f32>
  // expected-error @+1 {{'cac.reduce' op cannot reduce from seq to token}}
  %t = cac.reduce sum %r : !cac.field<seq, f32> -> !cac.field<token, f32>
}

// -----

cac.estimator @variance_over_tokens {
  %v = cac.input "value" : !cac.field<token, f32>
  // expected-error @+1 {{'cac.reduce' op variance and std reduce seq values over a group or the batch}}
  %s = cac.reduce var %v : !cac.field<token, f32> -> !cac.field<seq, f32>
}

// -----

cac.estimator @reduce_predicate {
  %v = cac.input "value" : !cac.field<token, f32>
  %z = cac.position : !cac.field<token, f32>
  %p = cac.cmp gt %v, %z : !cac.field<token, f32> -> !cac.field<token, i1>
  // expected-error @+1 {{'cac.reduce' op reduces numbers to numbers of the same type}}
  %s = cac.reduce sum %p : !cac.field<token, i1> -> !cac.field<seq, i1>
}

// -----

cac.estimator @reduce_changes_precision {
  %v = cac.input "value" : !cac.field<token, f32>
  // expected-error @+1 {{'cac.reduce' op reduces numbers to numbers of the same type}}
  %s = cac.reduce sum %v : !cac.field<token, f32> -> !cac.field<seq, f64>
}

// -----

cac.estimator @shift_by_two {
  %v = cac.input "value" : !cac.field<token, f32>
  %z = cac.position : !cac.field<token, f32>
  // expected-error @+1 {{'cac.shift' op offset must be 1 or -1}}
  %n = cac.shift %v by 2 fill %z : !cac.field<token, f32>
}

// -----

cac.estimator @shift_by_zero {
  %v = cac.input "value" : !cac.field<token, f32>
  // expected-error @+1 {{'cac.shift' op offset must be 1 or -1}}
  %n = cac.shift %v by 0 fill %v : !cac.field<token, f32>
}

// -----

cac.estimator @shift_seq {
  %r = cac.input "reward" : !cac.field<seq, f32>
  // expected-error @+1 {{'cac.shift' op shifts along token or seg values}}
  %n = cac.shift %r by 1 fill %r : !cac.field<seq, f32>
}

// -----

cac.estimator @scan_seq {
  %r = cac.input "reward" : !cac.field<seq, f32>
  // expected-error @+1 {{'cac.scan' op scans along token or seg values}}
  %s = cac.scan reverse %r, %r : !cac.field<seq, f32>
}

// -----

cac.estimator @scan_predicate {
  %v = cac.input "value" : !cac.field<token, f32>
  %p = cac.cmp gt %v, %v : !cac.field<token, f32> -> !cac.field<token, i1>
  // expected-error @+1 {{'cac.scan' op input, decay and result must be numbers of one type}}
  %s = cac.scan %p, %p : !cac.field<token, i1>
}

// -----

cac.estimator @select_number_condition {
  %v = cac.input "value" : !cac.field<token, f32>
  // expected-error @+1 {{'cac.select' op condition must be a predicate}}
  %s = cac.select %v, %v, %v : !cac.field<token, f32>, !cac.field<token, f32>
}

// -----

cac.estimator @select_condition_domain {
  %v = cac.input "value" : !cac.field<token, f32>
  %r = cac.input "reward" : !cac.field<seq, f32>
  %p = cac.cmp gt %r, %r : !cac.field<seq, f32> -> !cac.field<seq, i1>
  // expected-error @+1 {{'cac.select' op operands must share the result's type and domain}}
  %s = cac.select %p, %v, %v : !cac.field<seq, i1>, !cac.field<token, f32>
}

// -----

cac.estimator @param_not_scalar {
  // expected-error @+1 {{'cac.param' op a parameter is a scalar number}}
  %p = cac.param "lambda" default 0.95 : !cac.field<token, f32>
}

// -----

cac.estimator @param_predicate {
  // expected-error @+1 {{'cac.param' op a parameter is a scalar number}}
  %p = cac.param "flag" : !cac.field<scalar, i1>
}

// -----

cac.estimator @input_scalar {
  // expected-error @+1 {{'cac.input' op an input cannot be a scalar; use cac.param}}
  %i = cac.input "x" : !cac.field<scalar, f32>
}

// -----

cac.estimator @output_scalar {
  %p = cac.param "k" : !cac.field<scalar, f32>
  // expected-error @+1 {{'cac.output' op an output must have a domain; broadcast it first}}
  cac.output "k" %p : !cac.field<scalar, f32>
}

// -----

cac.estimator @constant_not_scalar {
  // expected-error @+1 {{'cac.constant' op a constant is a scalar}}
  %c = cac.constant 1.0 : f32 : !cac.field<token, f32>
}

// -----

cac.estimator @constant_type {
  // expected-error @+1 {{'cac.constant' op value type does not match the element type}}
  %c = cac.constant 1.0 : f64 : !cac.field<scalar, f32>
}

// -----

cac.estimator @arithmetic_on_predicates {
  %t = cac.constant true : !cac.field<scalar, i1>
  // expected-error @+1 {{'cac.binary' op arithmetic takes numbers}}
  %s = cac.binary add %t, %t : !cac.field<scalar, i1>
}

// -----

cac.estimator @and_on_numbers {
  %c = cac.constant 1.0 : f32 : !cac.field<scalar, f32>
  // expected-error @+1 {{'cac.binary' op and/or take predicates}}
  %s = cac.binary and %c, %c : !cac.field<scalar, f32>
}

// -----

cac.estimator @binary_mixed_domains {
  %v = cac.input "value" : !cac.field<token, f32>
  // expected-note @+1 {{prior use here}}
  %r = cac.input "reward" : !cac.field<seq, f32>
  // expected-error @+1 {{use of value '%r' expects different type than prior uses: '!cac.field<token, f32>' vs '!cac.field<seq, f32>'}}
  %s = cac.binary add %v, %r : !cac.field<token, f32>
}

// -----

cac.estimator @not_on_number {
  %v = cac.input "value" : !cac.field<token, f32>
  // expected-error @+1 {{'cac.unary' op not takes a predicate}}
  %n = cac.unary not %v : !cac.field<token, f32>
}

// -----

cac.estimator @exp_of_predicate {
  %t = cac.constant true : !cac.field<scalar, i1>
  // expected-error @+1 {{'cac.unary' op arithmetic takes numbers}}
  %n = cac.unary exp %t : !cac.field<scalar, i1>
}

// -----

cac.estimator @compare_predicates {
  %t = cac.constant true : !cac.field<scalar, i1>
  // expected-error @+1 {{'cac.cmp' op compares numbers}}
  %p = cac.cmp eq %t, %t : !cac.field<scalar, i1> -> !cac.field<scalar, i1>
}

// -----

cac.estimator @compare_result_domain {
  %v = cac.input "value" : !cac.field<token, f32>
  // expected-error @+1 {{'cac.cmp' op result must be a predicate of the operands' domain}}
  %p = cac.cmp lt %v, %v : !cac.field<token, f32> -> !cac.field<seq, i1>
}

// -----

cac.estimator @compare_result_number {
  %v = cac.input "value" : !cac.field<token, f32>
  // expected-error @+1 {{'cac.cmp' op result must be a predicate of the operands' domain}}
  %p = cac.cmp lt %v, %v : !cac.field<token, f32> -> !cac.field<token, f32>
}

// -----

cac.estimator @cast_number {
  %v = cac.input "value" : !cac.field<token, f32>
  // expected-error @+1 {{'cac.cast' op casts a predicate to a number of the same domain}}
  %c = cac.cast %v : !cac.field<token, f32> -> !cac.field<token, f32>
}

// -----

cac.estimator @cast_domain {
  %t = cac.constant true : !cac.field<scalar, i1>
  // expected-error @+1 {{'cac.cast' op casts a predicate to a number of the same domain}}
  %c = cac.cast %t : !cac.field<scalar, i1> -> !cac.field<token, f32>
}

// -----

cac.estimator @position_seq {
  // expected-error @+1 {{'cac.position' op is a token number}}
  %p = cac.position : !cac.field<seq, f32>
}

// -----

cac.estimator @length_token {
  // expected-error @+1 {{'cac.length' op is a seq number}}
  %l = cac.length : !cac.field<token, f32>
}

// -----

cac.estimator @kernel_token_grid {
  %v = cac.input "value" : !cac.field<token, f32>
  // expected-error @+1 {{'cac.kernel' op grid must be seq, group, node or batch}}
  cac.kernel token 0 {
    cac.output "v" %v : !cac.field<token, f32>
  }
}

// -----

cac.estimator @kernel_yield_types {
  %r = cac.input "reward" : !cac.field<seq, f32>
  // expected-error @+1 {{'cac.kernel' op yielded types do not match the results}}
  %k = cac.kernel group 1 {
    %m = cac.reduce mean %r : !cac.field<seq, f32> -> !cac.field<group, f32>
    cac.yield %r : !cac.field<seq, f32>
  } : !cac.field<group, f32>
}

// -----

cac.estimator @yield_outside_kernel {
  %r = cac.input "reward" : !cac.field<seq, f32>
  // expected-error @+1 {{'cac.yield' op expects parent op 'cac.kernel'}}
  cac.yield %r : !cac.field<seq, f32>
}

// -----

cac.estimator @field_of_i8 {
  // expected-error @+1 {{field elements must be f32, f64, i1 or i32, not 'i8'}}
  %v = cac.input "value" : !cac.field<token, i8>
}

// -----

// expected-error @+2 {{expected ::cac::ir::Domain to be one of: scalar, token, seg, seq, group, node}}
// expected-error @+1 {{failed to parse Cac_FieldType parameter 'domain'}}
func.func private @bad_domain(!cac.field<tokens, f32>)

// -----

cac.estimator @group_rank_of_tokens {
  %v = cac.input "value" : !cac.field<token, f32>
  // expected-error @+1 {{'cac.group_rank' op ranks the numbers of a seq field}}
  %r = cac.group_rank %v : !cac.field<token, f32>
}

// -----

cac.estimator @group_pos_sum_of_seqs {
  %v = cac.input "reward" : !cac.field<seq, f32>
  // expected-error @+1 {{'cac.group_pos_sum' op sums the numbers of a token field}}
  %s = cac.group_pos_sum %v : !cac.field<seq, f32>
}

// -----

cac.estimator @batch_kth_of_seqs {
  %v = cac.input "reward" : !cac.field<seq, f64>
  %k = cac.constant 2.0 : f64 : !cac.field<scalar, f64>
  // expected-error @+1 {{'cac.batch_kth' op takes the numbers of a token field and a scalar or batch count, and gives a batch number}}
  %f = cac.batch_kth %v, %k : !cac.field<seq, f64>, !cac.field<scalar, f64> -> !cac.field<batch, f64>
}

// -----

cac.estimator @batch_top_k_seq_index {
  %v = cac.input "value" : !cac.field<token, f64>
  %r = cac.input "reward" : !cac.field<seq, f64>
  // expected-error @+1 {{'cac.batch_top_k' op flags a token field's tokens from a batch index (a cac.batch_kth of it), as a token predicate}}
  %p = cac.batch_top_k %v, %r : !cac.field<token, f64>, !cac.field<seq, f64> -> !cac.field<token, i1>
}

// -----

cac.estimator @uniform_token_seed {
  %v = cac.input "value" : !cac.field<token, f64>
  // expected-error @+1 {{'cac.uniform' op takes a scalar seed and gives token numbers}}
  %u = cac.uniform %v : !cac.field<token, f64> -> !cac.field<token, f64>
}
