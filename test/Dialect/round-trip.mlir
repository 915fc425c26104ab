// Every operation of the cac dialect parses, verifies and prints back in the
// same form; the printed form parses again, and so does the generic form.
//
// RUN: cac-opt %s | FileCheck %s
// RUN: cac-opt %s | cac-opt | FileCheck %s
// RUN: cac-opt %s --mlir-print-op-generic | cac-opt | FileCheck %s

// CHECK-LABEL: cac.estimator @all_ops {
cac.estimator @all_ops {
  // CHECK-NEXT: %[[V:.*]] = cac.input "value" : <token, f32>
  // CHECK-NEXT: %[[R:.*]] = cac.input "reward" : <seq, f32>
  // CHECK-NEXT: %[[G:.*]] = cac.input "bonus" : <group, f32>
  // CHECK-NEXT: %[[GAMMA:.*]] = cac.param "gamma" default 1.000000e+00 : <scalar, f32>
  // CHECK-NEXT: %[[K:.*]] = cac.param "k" : <scalar, f32>
  // CHECK-NEXT: %[[C:.*]] = cac.constant 5.000000e-01 : f32 : <scalar, f32>
  // CHECK-NEXT: %[[T:.*]] = cac.constant true : <scalar, i1>
  %v = cac.input "value" : !cac.field<token, f32>
  %r = cac.input "reward" : !cac.field<seq, f32>
  %g = cac.input "bonus" : !cac.field<group, f32>
  %gamma = cac.param "gamma" default 1.0 : !cac.field<scalar, f32>
  %k = cac.param "k" : !cac.field<scalar, f32>
  %c = cac.constant 0.5 : f32 : !cac.field<scalar, f32>
  %t = cac.constant true : !cac.field<scalar, i1>

  // CHECK-NEXT: %[[CT:.*]] = cac.broadcast %[[C]] : <scalar, f32> -> <token, f32>
  // CHECK-NEXT: %[[GS:.*]] = cac.broadcast %[[G]] : <group, f32> -> <seq, f32>
  // CHECK-NEXT: %[[RT:.*]] = cac.broadcast %[[R]] : <seq, f32> -> <token, f32>
  // CHECK-NEXT: %[[TT:.*]] = cac.broadcast %[[T]] : <scalar, i1> -> <token, i1>
  %ct = cac.broadcast %c : !cac.field<scalar, f32> -> !cac.field<token, f32>
  %gs = cac.broadcast %g : !cac.field<group, f32> -> !cac.field<seq, f32>
  %rt = cac.broadcast %r : !cac.field<seq, f32> -> !cac.field<token, f32>
  %tt = cac.broadcast %t : !cac.field<scalar, i1> -> !cac.field<token, i1>

  // CHECK-NEXT: cac.binary add %[[V]], %[[CT]] : <token, f32>
  // CHECK-NEXT: cac.binary sub %[[V]], %[[CT]] : <token, f32>
  // CHECK-NEXT: cac.binary mul %[[V]], %[[CT]] : <token, f32>
  // CHECK-NEXT: cac.binary div %[[V]], %[[CT]] : <token, f32>
  // CHECK-NEXT: cac.binary min %[[R]], %[[GS]] : <seq, f32>
  // CHECK-NEXT: cac.binary max %[[R]], %[[GS]] : <seq, f32>
  // CHECK-NEXT: cac.binary pow %[[GAMMA]], %[[K]] : <scalar, f32>
  %b0 = cac.binary add %v, %ct : !cac.field<token, f32>
  %b1 = cac.binary sub %v, %ct : !cac.field<token, f32>
  %b2 = cac.binary mul %v, %ct : !cac.field<token, f32>
  %b3 = cac.binary div %v, %ct : !cac.field<token, f32>
  %b4 = cac.binary min %r, %gs : !cac.field<seq, f32>
  %b5 = cac.binary max %r, %gs : !cac.field<seq, f32>
  %b6 = cac.binary pow %gamma, %k : !cac.field<scalar, f32>

  // CHECK-NEXT: cac.unary neg %[[V]] : <token, f32>
  // CHECK-NEXT: cac.unary exp %[[V]] : <token, f32>
  // CHECK-NEXT: cac.unary log %[[V]] : <token, f32>
  // CHECK-NEXT: cac.unary sqrt %[[R]] : <seq, f32>
  // CHECK-NEXT: cac.unary abs %[[R]] : <seq, f32>
  // CHECK-NEXT: cac.unary sigmoid %[[G]] : <group, f32>
  %u0 = cac.unary neg %v : !cac.field<token, f32>
  %u1 = cac.unary exp %v : !cac.field<token, f32>
  %u2 = cac.unary log %v : !cac.field<token, f32>
  %u3 = cac.unary sqrt %r : !cac.field<seq, f32>
  %u4 = cac.unary abs %r : !cac.field<seq, f32>
  %u5 = cac.unary sigmoid %g : !cac.field<group, f32>

  // CHECK-NEXT: %[[LT:.*]] = cac.cmp lt %[[V]], %[[RT]] : <token, f32> -> <token, i1>
  // CHECK-NEXT: cac.cmp le %[[V]], %[[RT]] : <token, f32> -> <token, i1>
  // CHECK-NEXT: cac.cmp gt %[[V]], %[[RT]] : <token, f32> -> <token, i1>
  // CHECK-NEXT: cac.cmp ge %[[V]], %[[RT]] : <token, f32> -> <token, i1>
  // CHECK-NEXT: cac.cmp eq %[[GAMMA]], %[[K]] : <scalar, f32> -> <scalar, i1>
  // CHECK-NEXT: cac.cmp ne %[[GAMMA]], %[[K]] : <scalar, f32> -> <scalar, i1>
  %lt = cac.cmp lt %v, %rt : !cac.field<token, f32> -> !cac.field<token, i1>
  %le = cac.cmp le %v, %rt : !cac.field<token, f32> -> !cac.field<token, i1>
  %gt = cac.cmp gt %v, %rt : !cac.field<token, f32> -> !cac.field<token, i1>
  %ge = cac.cmp ge %v, %rt : !cac.field<token, f32> -> !cac.field<token, i1>
  %eq = cac.cmp eq %gamma, %k : !cac.field<scalar, f32> -> !cac.field<scalar, i1>
  %ne = cac.cmp ne %gamma, %k : !cac.field<scalar, f32> -> !cac.field<scalar, i1>

  // CHECK-NEXT: %[[AND:.*]] = cac.binary and %[[LT]], %[[TT]] : <token, i1>
  // CHECK-NEXT: %[[OR:.*]] = cac.binary or %[[AND]], %[[TT]] : <token, i1>
  // CHECK-NEXT: %[[NOT:.*]] = cac.unary not %[[OR]] : <token, i1>
  // CHECK-NEXT: cac.select %[[NOT]], %[[V]], %[[CT]] : <token, i1>, <token, f32>
  // CHECK-NEXT: cac.cast %[[NOT]] : <token, i1> -> <token, f32>
  %and = cac.binary and %lt, %tt : !cac.field<token, i1>
  %or = cac.binary or %and, %tt : !cac.field<token, i1>
  %not = cac.unary not %or : !cac.field<token, i1>
  %sel = cac.select %not, %v, %ct : !cac.field<token, i1>, !cac.field<token, f32>
  %cast = cac.cast %not : !cac.field<token, i1> -> !cac.field<token, f32>

  // CHECK-NEXT: cac.position : <token, f32>
  // CHECK-NEXT: cac.length : <seq, f32>
  // CHECK-NEXT: cac.shift %[[V]] by 1 fill %[[CT]] : <token, f32>
  // CHECK-NEXT: cac.shift %[[V]] by -1 fill %[[CT]] : <token, f32>
  // CHECK-NEXT: cac.scan %[[V]], %[[CT]] : <token, f32>
  // CHECK-NEXT: cac.scan reverse %[[V]], %[[CT]] : <token, f32>
  %pos = cac.position : !cac.field<token, f32>
  %len = cac.length : !cac.field<seq, f32>
  %next = cac.shift %v by 1 fill %ct : !cac.field<token, f32>
  %prev = cac.shift %v by -1 fill %ct : !cac.field<token, f32>
  %scan = cac.scan %v, %ct : !cac.field<token, f32>
  %rscan = cac.scan reverse %v, %ct : !cac.field<token, f32>

  // CHECK-NEXT: cac.reduce sum %[[V]] : <token, f32> -> <seq, f32>
  // CHECK-NEXT: cac.reduce mean %[[V]] : <token, f32> -> <seq, f32>
  // CHECK-NEXT: cac.reduce min %[[V]] : <token, f32> -> <seq, f32>
  // CHECK-NEXT: cac.reduce max %[[V]] : <token, f32> -> <seq, f32>
  // CHECK-NEXT: cac.reduce first %[[V]] : <token, f32> -> <seq, f32>
  // CHECK-NEXT: cac.reduce last %[[V]] : <token, f32> -> <seq, f32>
  // CHECK-NEXT: cac.reduce count %[[R]] : <seq, f32> -> <group, f32>
  // CHECK-NEXT: cac.reduce var %[[R]] : <seq, f32> -> <group, f32>
  // CHECK-NEXT: cac.reduce std %[[R]] : <seq, f32> -> <group, f32>
  // CHECK-NEXT: cac.reduce var_unbiased %[[R]] : <seq, f32> -> <group, f32>
  // CHECK-NEXT: cac.reduce std_unbiased %[[R]] : <seq, f32> -> <group, f32>
  %s0 = cac.reduce sum %v : !cac.field<token, f32> -> !cac.field<seq, f32>
  %s1 = cac.reduce mean %v : !cac.field<token, f32> -> !cac.field<seq, f32>
  %s2 = cac.reduce min %v : !cac.field<token, f32> -> !cac.field<seq, f32>
  %s3 = cac.reduce max %v : !cac.field<token, f32> -> !cac.field<seq, f32>
  %s4 = cac.reduce first %v : !cac.field<token, f32> -> !cac.field<seq, f32>
  %s5 = cac.reduce last %v : !cac.field<token, f32> -> !cac.field<seq, f32>
  %s6 = cac.reduce count %r : !cac.field<seq, f32> -> !cac.field<group, f32>
  %s7 = cac.reduce var %r : !cac.field<seq, f32> -> !cac.field<group, f32>
  %s8 = cac.reduce std %r : !cac.field<seq, f32> -> !cac.field<group, f32>
  %s9 = cac.reduce var_unbiased %r : !cac.field<seq, f32> -> !cac.field<group, f32>
  %s10 = cac.reduce std_unbiased %r : !cac.field<seq, f32> -> !cac.field<group, f32>

  // CHECK-NEXT: cac.output "adv" %[[V]] : <token, f32>
  // CHECK-NEXT: cac.output "flag" %[[NOT]] : <token, i1>
  cac.output "adv" %v : !cac.field<token, f32>
  cac.output "flag" %not : !cac.field<token, i1>
}

// Kernels (what cac-partition makes) with and without results, in f64.
// CHECK-LABEL: cac.estimator @kernels {
cac.estimator @kernels {
  // CHECK-NEXT: %[[R:.*]] = cac.input "reward" : <seq, f64>
  // CHECK-NEXT: %[[K:.*]]:2 = cac.kernel group 1 {
  // CHECK-NEXT:   %[[M:.*]] = cac.reduce mean %[[R]] : <seq, f64> -> <group, f64>
  // CHECK-NEXT:   %[[S:.*]] = cac.reduce std %[[R]] : <seq, f64> -> <group, f64>
  // CHECK-NEXT:   cac.yield %[[M]], %[[S]] : !cac.field<group, f64>, !cac.field<group, f64>
  // CHECK-NEXT: } : !cac.field<group, f64>, !cac.field<group, f64>
  // CHECK-NEXT: cac.kernel seq 2 {
  // CHECK-NEXT:   %[[MS:.*]] = cac.broadcast %[[K]]#0 : <group, f64> -> <seq, f64>
  // CHECK-NEXT:   %[[D:.*]] = cac.binary sub %[[R]], %[[MS]] : <seq, f64>
  // CHECK-NEXT:   cac.output "centred" %[[D]] : <seq, f64>
  // CHECK-NEXT: }
  // CHECK-NEXT: }
  %r = cac.input "reward" : !cac.field<seq, f64>
  %k:2 = cac.kernel group 1 {
    %m = cac.reduce mean %r : !cac.field<seq, f64> -> !cac.field<group, f64>
    %s = cac.reduce std %r : !cac.field<seq, f64> -> !cac.field<group, f64>
    cac.yield %m, %s : !cac.field<group, f64>, !cac.field<group, f64>
  } : !cac.field<group, f64>, !cac.field<group, f64>
  cac.kernel seq 2 {
    %ms = cac.broadcast %k#0 : !cac.field<group, f64> -> !cac.field<seq, f64>
    %d = cac.binary sub %r, %ms : !cac.field<seq, f64>
    cac.output "centred" %d : !cac.field<seq, f64>
  }
}
