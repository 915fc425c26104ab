// cac-fuse-groups marks with `cac.fused` the group kernels that the seq
// kernels reading them compute themselves: a group kernel that reads no
// other kernel's results, writes no output and is read by seq kernels only.
//
// RUN: cac-opt %s -split-input-file --pass-pipeline='builtin.module(cac.estimator(cac-partition,cac-fuse-groups))' | FileCheck %s

// GRPO: the group statistics read only the input reward; the seq kernel
// reads them. Fused.
// CHECK-LABEL: cac.estimator @grpo {
// CHECK:         cac.kernel group 0 attributes {cac.fused} {
// CHECK:           cac.reduce mean
// CHECK:         cac.kernel seq 1 {
cac.estimator @grpo {
  %reward = cac.input "reward" : !cac.field<seq, f32>
  %mean = cac.reduce mean %reward : !cac.field<seq, f32> -> !cac.field<group, f32>
  %mean_s = cac.broadcast %mean : !cac.field<group, f32> -> !cac.field<seq, f32>
  %a = cac.binary sub %reward, %mean_s : !cac.field<seq, f32>
  %a_t = cac.broadcast %a : !cac.field<seq, f32> -> !cac.field<token, f32>
  cac.output "adv" %a_t : !cac.field<token, f32>
}

// -----

// The group kernel reduces a value of the seq kernel before it: not fused
// (its members' values are computed by another launch).
// CHECK-LABEL: cac.estimator @reads_kernel {
// CHECK:         cac.kernel seq 0 {
// CHECK:         cac.kernel group 1 {
// CHECK-NOT:     cac.fused
cac.estimator @reads_kernel {
  %logp = cac.input "logp" : !cac.field<token, f32>
  %m = cac.reduce mean %logp : !cac.field<token, f32> -> !cac.field<seq, f32>
  %gm = cac.reduce mean %m : !cac.field<seq, f32> -> !cac.field<group, f32>
  %gm_t = cac.broadcast %gm : !cac.field<group, f32> -> !cac.field<token, f32>
  %d = cac.binary sub %logp, %gm_t : !cac.field<token, f32>
  cac.output "adv" %d : !cac.field<token, f32>
}

// -----

// The group kernel writes a group output: not fused (the output is written
// once per group).
// CHECK-LABEL: cac.estimator @group_output {
// CHECK:         cac.kernel group 0 {
// CHECK:           cac.output "m"
// CHECK-NOT:     cac.fused
cac.estimator @group_output {
  %reward = cac.input "reward" : !cac.field<seq, f32>
  %mean = cac.reduce mean %reward : !cac.field<seq, f32> -> !cac.field<group, f32>
  cac.output "m" %mean : !cac.field<group, f32>
  %mean_s = cac.broadcast %mean : !cac.field<group, f32> -> !cac.field<seq, f32>
  %a = cac.binary sub %reward, %mean_s : !cac.field<seq, f32>
  cac.output "adv" %a : !cac.field<seq, f32>
}
