// RUN: not cac-opt %s --cac-lower-kernels 2>&1 | FileCheck %s
// A group kernel that writes a group output cannot be fused: the lowering
// rejects the mark.
// CHECK: error: 'cac.kernel' op is marked cac.fused but is not a group kernel
cac.estimator @group_output {
  %reward = cac.input "reward" : !cac.field<seq, f32>
  %0 = cac.kernel group 0 attributes {cac.fused} {
    %m = cac.reduce mean %reward : !cac.field<seq, f32> -> !cac.field<group, f32>
    cac.output "m" %m : !cac.field<group, f32>
    cac.yield %m : !cac.field<group, f32>
  } : !cac.field<group, f32>
  cac.kernel seq 1 {
    %m_s = cac.broadcast %0 : !cac.field<group, f32> -> !cac.field<seq, f32>
    %a = cac.binary sub %reward, %m_s : !cac.field<seq, f32>
    cac.output "adv" %a : !cac.field<seq, f32>
  }
}
