// cac-partition groups the operations of an estimator into one cac.kernel per
// phase: even phases run per sequence (grid seq), odd phases per group. Inputs,
// parameters and scalar arithmetic stay outside; values that later kernels read
// are yielded; broadcasts of parameters, positions and lengths, and a seq
// kernel's elementwise maps of inputs, are recomputed in each kernel instead
// of being yielded; a group_pos_sum's operand that maps one stored value is
// computed at the group's members by the kernel of the sum.
//
// RUN: cac-opt %s -split-input-file --pass-pipeline='builtin.module(cac.estimator(cac-partition))' | FileCheck %s

// GAE: everything runs per sequence, in one kernel that yields nothing.
// CHECK-LABEL: cac.estimator @gae {
// CHECK-DAG:     %[[VALUE:.*]] = cac.input "value" : <token, f32>
// CHECK-DAG:     %[[REWARD:.*]] = cac.input "reward" : <seq, f32>
// CHECK-DAG:     %[[GAMMA:.*]] = cac.param "gamma" default 1.000000e+00 : <scalar, f32>
// CHECK-DAG:     %[[LAMBDA:.*]] = cac.param "lambda" default 0.94999999999999996 : <scalar, f32>
// CHECK:         %[[GL:.*]] = cac.binary mul %[[GAMMA]], %[[LAMBDA]] : <scalar, f32>
// CHECK-NEXT:    cac.kernel seq 0 {
// CHECK:           %[[LEN:.*]] = cac.length : <seq, f32>
// CHECK:           %[[POS:.*]] = cac.position : <token, f32>
// CHECK:           %[[LAST:.*]] = cac.cmp eq %[[POS]], %{{.*}} : <token, f32> -> <token, i1>
// CHECK:           %[[NEXT:.*]] = cac.shift %[[VALUE]] by 1 fill %{{.*}} : <token, f32>
// CHECK:           %[[DELTA:.*]] = cac.binary sub %{{.*}}, %[[VALUE]] : <token, f32>
// CHECK-NEXT:      %[[DECAY:.*]] = cac.broadcast %[[GL]] : <scalar, f32> -> <token, f32>
// CHECK-NEXT:      %[[ADV:.*]] = cac.scan reverse %[[DELTA]], %[[DECAY]] : <token, f32>
// CHECK-NEXT:      cac.output "adv" %[[ADV]] : <token, f32>
// CHECK-NEXT:      %[[RET:.*]] = cac.binary add %[[ADV]], %[[VALUE]] : <token, f32>
// CHECK-NEXT:      cac.output "ret" %[[RET]] : <token, f32>
// CHECK-NEXT:    }
// CHECK-NEXT:  }
// CHECK-NOT:   cac.kernel
cac.estimator @gae {
  %value = cac.input "value" : !cac.field<token, f32>
  %reward = cac.input "reward" : !cac.field<seq, f32>
  %gamma = cac.param "gamma" default 1.0 : !cac.field<scalar, f32>
  %lambda = cac.param "lambda" default 0.95 : !cac.field<scalar, f32>
  %one = cac.constant 1.0 : f32 : !cac.field<scalar, f32>
  %len = cac.length : !cac.field<seq, f32>
  %one_s = cac.broadcast %one : !cac.field<scalar, f32> -> !cac.field<seq, f32>
  %lastpos = cac.binary sub %len, %one_s : !cac.field<seq, f32>
  %pos = cac.position : !cac.field<token, f32>
  %lastpos_t = cac.broadcast %lastpos : !cac.field<seq, f32> -> !cac.field<token, f32>
  %is_last = cac.cmp eq %pos, %lastpos_t : !cac.field<token, f32> -> !cac.field<token, i1>
  %zero = cac.constant 0.0 : f32 : !cac.field<scalar, f32>
  %reward_t = cac.broadcast %reward : !cac.field<seq, f32> -> !cac.field<token, f32>
  %zero_t = cac.broadcast %zero : !cac.field<scalar, f32> -> !cac.field<token, f32>
  %r = cac.select %is_last, %reward_t, %zero_t : !cac.field<token, i1>, !cac.field<token, f32>
  %next = cac.shift %value by 1 fill %zero_t : !cac.field<token, f32>
  %gamma_t = cac.broadcast %gamma : !cac.field<scalar, f32> -> !cac.field<token, f32>
  %gnext = cac.binary mul %gamma_t, %next : !cac.field<token, f32>
  %sum = cac.binary add %r, %gnext : !cac.field<token, f32>
  %delta = cac.binary sub %sum, %value : !cac.field<token, f32>
  %gl = cac.binary mul %gamma, %lambda : !cac.field<scalar, f32>
  %gl_t = cac.broadcast %gl : !cac.field<scalar, f32> -> !cac.field<token, f32>
  %adv = cac.scan reverse %delta, %gl_t : !cac.field<token, f32>
  cac.output "adv" %adv : !cac.field<token, f32>
  %ret = cac.binary add %adv, %value : !cac.field<token, f32>
  cac.output "ret" %ret : !cac.field<token, f32>
}

// -----

// GRPO: the group statistics in a group kernel (phase 0), which yields the
// scale and the mean; the normalisation per sequence in a seq kernel (phase 1).
// CHECK-LABEL: cac.estimator @grpo {
// CHECK-DAG:     %[[REWARD:.*]] = cac.input "reward" : <seq, f32>
// CHECK-DAG:     %[[EPS:.*]] = cac.param "eps"
// CHECK-DAG:     %[[UNBIASED:.*]] = cac.param "unbiased"
// CHECK:         %[[COND:.*]] = cac.cmp gt %[[UNBIASED]], %{{.*}} : <scalar, f32> -> <scalar, i1>
// CHECK:         %[[STATS:.*]]:2 = cac.kernel group 0 {
// CHECK-DAG:       %[[VARU:.*]] = cac.reduce var_unbiased %[[REWARD]] : <seq, f32> -> <group, f32>
// CHECK-DAG:       %[[VAR:.*]] = cac.reduce var %[[REWARD]] : <seq, f32> -> <group, f32>
// CHECK-DAG:       %[[COND_G:.*]] = cac.broadcast %[[COND]] : <scalar, i1> -> <group, i1>
// CHECK:           %[[V:.*]] = cac.select %[[COND_G]], %[[VARU]], %[[VAR]] : <group, i1>, <group, f32>
// CHECK:           %[[SQRT:.*]] = cac.unary sqrt %[[V]] : <group, f32>
// CHECK:           %[[SCALE:.*]] = cac.binary add %[[SQRT]], %{{.*}} : <group, f32>
// CHECK:           %[[MEAN:.*]] = cac.reduce mean %[[REWARD]] : <seq, f32> -> <group, f32>
// CHECK-NEXT:      cac.yield %[[SCALE]], %[[MEAN]] : !cac.field<group, f32>, !cac.field<group, f32>
// CHECK-NEXT:    } : !cac.field<group, f32>, !cac.field<group, f32>
// CHECK-NEXT:    cac.kernel seq 1 {
// CHECK-NEXT:      %[[MEAN_S:.*]] = cac.broadcast %[[STATS]]#1 : <group, f32> -> <seq, f32>
// CHECK-NEXT:      %[[CENTRED:.*]] = cac.binary sub %[[REWARD]], %[[MEAN_S]] : <seq, f32>
// CHECK-NEXT:      %[[SCALE_S:.*]] = cac.broadcast %[[STATS]]#0 : <group, f32> -> <seq, f32>
// CHECK-NEXT:      %[[A:.*]] = cac.binary div %[[CENTRED]], %[[SCALE_S]] : <seq, f32>
// CHECK-NEXT:      %[[A_T:.*]] = cac.broadcast %[[A]] : <seq, f32> -> <token, f32>
// CHECK-NEXT:      cac.output "adv" %[[A_T]] : <token, f32>
// CHECK-NEXT:    }
// CHECK-NEXT:  }
cac.estimator @grpo {
  %reward = cac.input "reward" : !cac.field<seq, f32>
  %eps = cac.param "eps" default 1.0e-6 : !cac.field<scalar, f32>
  %unbiased = cac.param "unbiased" default 0.0 : !cac.field<scalar, f32>
  %zero = cac.constant 0.0 : f32 : !cac.field<scalar, f32>
  %cond = cac.cmp gt %unbiased, %zero : !cac.field<scalar, f32> -> !cac.field<scalar, i1>
  %varu = cac.reduce var_unbiased %reward : !cac.field<seq, f32> -> !cac.field<group, f32>
  %var = cac.reduce var %reward : !cac.field<seq, f32> -> !cac.field<group, f32>
  %cond_g = cac.broadcast %cond : !cac.field<scalar, i1> -> !cac.field<group, i1>
  %v = cac.select %cond_g, %varu, %var : !cac.field<group, i1>, !cac.field<group, f32>
  %sqrt = cac.unary sqrt %v : !cac.field<group, f32>
  %eps_g = cac.broadcast %eps : !cac.field<scalar, f32> -> !cac.field<group, f32>
  %scale = cac.binary add %sqrt, %eps_g : !cac.field<group, f32>
  %mean = cac.reduce mean %reward : !cac.field<seq, f32> -> !cac.field<group, f32>
  %mean_s = cac.broadcast %mean : !cac.field<group, f32> -> !cac.field<seq, f32>
  %centred = cac.binary sub %reward, %mean_s : !cac.field<seq, f32>
  %scale_s = cac.broadcast %scale : !cac.field<group, f32> -> !cac.field<seq, f32>
  %a = cac.binary div %centred, %scale_s : !cac.field<seq, f32>
  %a_t = cac.broadcast %a : !cac.field<seq, f32> -> !cac.field<token, f32>
  cac.output "adv" %a_t : !cac.field<token, f32>
}

// -----

// Three phases: a token -> seq reduction (seq 0), a seq -> group reduction
// (group 1) with a group output, and a token output that reads both (seq 2).
// The length under a broadcast is recomputed in kernel 2, not yielded by
// kernel 0; the broadcast parameter stays in kernel 0, its only reader.
// CHECK-LABEL: cac.estimator @three_phases {
// CHECK-DAG:     %[[LOGP:.*]] = cac.input "logp" : <token, f32>
// CHECK-DAG:     %[[K:.*]] = cac.param "k" : <scalar, f32>
// CHECK:         %[[K0:.*]] = cac.kernel seq 0 {
// CHECK-NEXT:      %[[M:.*]] = cac.reduce mean %[[LOGP]] : <token, f32> -> <seq, f32>
// CHECK-NEXT:      %[[K_S:.*]] = cac.broadcast %[[K]] : <scalar, f32> -> <seq, f32>
// CHECK-NEXT:      %[[S:.*]] = cac.binary mul %[[M]], %[[K_S]] : <seq, f32>
// CHECK-NEXT:      cac.yield %[[S]] : !cac.field<seq, f32>
// CHECK-NEXT:    } : !cac.field<seq, f32>
// CHECK-NEXT:    %[[K1:.*]] = cac.kernel group 1 {
// CHECK-NEXT:      %[[GM:.*]] = cac.reduce mean %[[K0]] : <seq, f32> -> <group, f32>
// CHECK-NEXT:      %[[GX:.*]] = cac.reduce max %[[K0]] : <seq, f32> -> <group, f32>
// CHECK-NEXT:      cac.output "m" %[[GX]] : <group, f32>
// CHECK-NEXT:      cac.yield %[[GM]] : !cac.field<group, f32>
// CHECK-NEXT:    } : !cac.field<group, f32>
// CHECK-NEXT:    cac.kernel seq 2 {
// CHECK-NEXT:      %[[GM_T:.*]] = cac.broadcast %[[K1]] : <group, f32> -> <token, f32>
// CHECK-NEXT:      %[[D:.*]] = cac.binary sub %[[LOGP]], %[[GM_T]] : <token, f32>
// CHECK-NEXT:      %[[LEN:.*]] = cac.length : <seq, f32>
// CHECK-NEXT:      %[[LEN_T:.*]] = cac.broadcast %[[LEN]] : <seq, f32> -> <token, f32>
// CHECK-NEXT:      %[[A:.*]] = cac.binary div %[[D]], %[[LEN_T]] : <token, f32>
// CHECK-NEXT:      cac.output "adv" %[[A]] : <token, f32>
// CHECK-NEXT:    }
// CHECK-NEXT:  }
cac.estimator @three_phases {
  %logp = cac.input "logp" : !cac.field<token, f32>
  %k = cac.param "k" : !cac.field<scalar, f32>
  %len = cac.length : !cac.field<seq, f32>
  %len_t = cac.broadcast %len : !cac.field<seq, f32> -> !cac.field<token, f32>
  %m = cac.reduce mean %logp : !cac.field<token, f32> -> !cac.field<seq, f32>
  %k_s = cac.broadcast %k : !cac.field<scalar, f32> -> !cac.field<seq, f32>
  %s = cac.binary mul %m, %k_s : !cac.field<seq, f32>
  %gm = cac.reduce mean %s : !cac.field<seq, f32> -> !cac.field<group, f32>
  %gm_t = cac.broadcast %gm : !cac.field<group, f32> -> !cac.field<token, f32>
  %d = cac.binary sub %logp, %gm_t : !cac.field<token, f32>
  %a = cac.binary div %d, %len_t : !cac.field<token, f32>
  cac.output "adv" %a : !cac.field<token, f32>
  %gx = cac.reduce max %s : !cac.field<seq, f32> -> !cac.field<group, f32>
  cac.output "m" %gx : !cac.field<group, f32>
}

// -----

// A broadcast parameter read in two seq kernels is recomputed in each.
// CHECK-LABEL: cac.estimator @clone_cheap {
// CHECK:         %[[P:.*]] = cac.param "p"
// CHECK:         cac.kernel seq 0 {
// CHECK:           cac.broadcast %[[P]] : <scalar, f32> -> <seq, f32>
// CHECK:           cac.yield
// CHECK:         cac.kernel group 1 {
// CHECK:         cac.kernel seq 2 {
// CHECK:           cac.broadcast %[[P]] : <scalar, f32> -> <seq, f32>
// CHECK:           cac.output "y"
cac.estimator @clone_cheap {
  %r = cac.input "reward" : !cac.field<seq, f32>
  %p = cac.param "p" : !cac.field<scalar, f32>
  %p_s = cac.broadcast %p : !cac.field<scalar, f32> -> !cac.field<seq, f32>
  %x = cac.binary mul %r, %p_s : !cac.field<seq, f32>
  %g = cac.reduce sum %x : !cac.field<seq, f32> -> !cac.field<group, f32>
  %g_s = cac.broadcast %g : !cac.field<group, f32> -> !cac.field<seq, f32>
  %y = cac.binary add %g_s, %p_s : !cac.field<seq, f32>
  cac.output "y" %y : !cac.field<seq, f32>
}

// -----

// Node kernels: a node op that reads its operand at other nodes (parent)
// starts a new node kernel after the one that computes the operand; the rest
// of the node arithmetic stays with it.
// CHECK-LABEL: cac.estimator @tree_phases {
// CHECK:         %[[V:.*]] = cac.kernel node 0 {
// CHECK:           cac.path_reduce leaf_mean
// CHECK:           cac.binary mul
// CHECK:           cac.yield
// CHECK:         cac.kernel node 1 {
// CHECK:           %[[P:.*]] = cac.parent %[[V]] fill
// CHECK:           cac.binary sub %[[V]], %[[P]]
// CHECK:           cac.output "d"
cac.estimator @tree_phases {
  %0 = cac.input "reward" : !cac.field<seq, f32>
  %1 = cac.path_reduce leaf_mean %0 : !cac.field<seq, f32> -> !cac.field<node, f32>
  %2 = cac.constant 2.000000e+00 : f32 : !cac.field<scalar, f32>
  %3 = cac.broadcast %2 : !cac.field<scalar, f32> -> !cac.field<node, f32>
  %4 = cac.binary mul %1, %3 : !cac.field<node, f32>
  %5 = cac.constant 0.000000e+00 : f32 : !cac.field<scalar, f32>
  %6 = cac.broadcast %5 : !cac.field<scalar, f32> -> !cac.field<node, f32>
  %7 = cac.parent %4 fill %6 : !cac.field<node, f32>
  %8 = cac.binary sub %4, %7 : !cac.field<node, f32>
  cac.output "d" %8 : !cac.field<node, f32>
}

// -----

// group_rank and group_pos_sum read their operand at other sequences: an
// operand computed per sequence is stored by the kernel before theirs (x * x,
// which reads the input twice), and a cheap length is not recomputed in their
// kernel but stored too; the broadcast of a literal is computed at each
// member (@member_maps below).
// CHECK-LABEL: cac.estimator @group_reads {
// CHECK:         %[[K0:.*]]:2 = cac.kernel seq 0 {
// CHECK-DAG:       %[[LEN:.*]] = cac.length : <seq, f32>
// CHECK-DAG:       %[[Y:.*]] = cac.binary mul
// CHECK:           cac.yield
// CHECK:         cac.kernel seq 1 {
// CHECK-DAG:       cac.group_rank %[[K0]]#{{[0-9]}} : <seq, f32>
// CHECK-DAG:       cac.group_pos_sum %[[K0]]#{{[0-9]}} : <token, f32>
// CHECK-DAG:       %[[ONE:.*]] = cac.broadcast %{{.*}} : <scalar, f32> -> <token, f32>
// CHECK-DAG:       cac.group_pos_sum %[[ONE]] : <token, f32>
// CHECK:         }
// CHECK-NOT:     cac.kernel
cac.estimator @group_reads {
  %x = cac.input "x" : !cac.field<token, f32>
  %group = cac.input "group" : !cac.field<seq, f32>
  %one = cac.constant 1.0 : f32 : !cac.field<scalar, f32>
  %len = cac.length : !cac.field<seq, f32>
  %rank = cac.group_rank %len : !cac.field<seq, f32>
  cac.output "rank" %rank : !cac.field<seq, f32>
  %y = cac.binary mul %x, %x : !cac.field<token, f32>
  %s = cac.group_pos_sum %y : !cac.field<token, f32>
  cac.output "s" %s : !cac.field<token, f32>
  %one_t = cac.broadcast %one : !cac.field<scalar, f32> -> !cac.field<token, f32>
  %n = cac.group_pos_sum %one_t : !cac.field<token, f32>
  cac.output "n" %n : !cac.field<token, f32>
}

// -----

// batch_top_k: the operand is stored by a seq kernel, cac.batch_kth reads all
// of it in a batch kernel, and cac.batch_top_k compares each token with the
// token it found in a later seq kernel (it reads the operand at that token).
// CHECK-LABEL: cac.estimator @topk {
// CHECK:         %[[X:.*]] = cac.kernel seq 0 {
// CHECK-NEXT:      %[[U:.*]] = cac.uniform %{{.*}} : <scalar, f64> -> <token, f64>
// CHECK-NEXT:      %[[M:.*]] = cac.binary mul %{{.*}}, %[[U]] : <token, f64>
// CHECK-NEXT:      cac.yield %[[M]] : !cac.field<token, f64>
// CHECK:         %[[F:.*]] = cac.kernel batch 1 {
// CHECK-NEXT:      %[[KTH:.*]] = cac.batch_kth %[[X]], %{{.*}} : <token, f64>, <scalar, f64> -> <batch, f64>
// CHECK-NEXT:      cac.yield %[[KTH]] : !cac.field<batch, f64>
// CHECK:         cac.kernel seq 2 {
// CHECK-NEXT:      %[[P:.*]] = cac.batch_top_k %[[X]], %[[F]] : <token, f64>, <batch, f64> -> <token, i1>
// CHECK-NEXT:      cac.output "top" %[[P]] : <token, i1>
cac.estimator @topk {
  %v = cac.input "value" : !cac.field<token, f64>
  %seed = cac.param "seed" default 3.0 : !cac.field<scalar, f64>
  %k = cac.param "k" default 2.0 : !cac.field<scalar, f64>
  %u = cac.uniform %seed : !cac.field<scalar, f64> -> !cac.field<token, f64>
  %x = cac.binary mul %v, %u : !cac.field<token, f64>
  %f = cac.batch_kth %x, %k : !cac.field<token, f64>, !cac.field<scalar, f64> -> !cac.field<batch, f64>
  %p = cac.batch_top_k %x, %f : !cac.field<token, f64>, !cac.field<batch, f64> -> !cac.field<token, i1>
  cac.output "top" %p : !cac.field<token, i1>
}

// -----

// Elementwise maps of inputs (and uniform's hash) that a later seq kernel
// reads are computed again there, once per kernel before its first reader,
// not yielded: the batch mean splits the two seq kernels, and only the sum
// that reads the maps crosses from the first to the batch kernel.
// CHECK-LABEL: cac.estimator @maps {
// CHECK:         cac.kernel seq 0 {
// CHECK:           cac.yield %{{.*}} : !cac.field<seq, f32>
// CHECK-NEXT:    } : !cac.field<seq, f32>
// CHECK:         cac.kernel batch 1 {
// CHECK:         cac.kernel seq 2 {
// CHECK-DAG:       %[[E:.*]] = cac.unary exp %{{.*}} : <token, f32>
// CHECK-DAG:       %[[U:.*]] = cac.uniform %{{.*}} : <scalar, f32> -> <token, f32>
// CHECK:           %[[EU:.*]] = cac.binary mul %[[E]], %[[U]] : <token, f32>
// CHECK-NEXT:      cac.binary sub %[[EU]], %{{.*}} : <token, f32>
// CHECK-NEXT:      cac.binary add %[[EU]], %[[E]] : <token, f32>
// CHECK-NEXT:      cac.binary mul
// CHECK-NEXT:      cac.output "y"
// CHECK-NEXT:    }
cac.estimator @maps {
  %x = cac.input "x" : !cac.field<token, f32>
  %seed = cac.param "seed" default 0.0 : !cac.field<scalar, f32>
  %e = cac.unary exp %x : !cac.field<token, f32>
  %u = cac.uniform %seed : !cac.field<scalar, f32> -> !cac.field<token, f32>
  %eu = cac.binary mul %e, %u : !cac.field<token, f32>
  %s = cac.reduce sum %eu : !cac.field<token, f32> -> !cac.field<seq, f32>
  %m = cac.reduce mean %s : !cac.field<seq, f32> -> !cac.field<batch, f32>
  %m_t = cac.broadcast %m : !cac.field<batch, f32> -> !cac.field<token, f32>
  %d = cac.binary sub %eu, %m_t : !cac.field<token, f32>
  %y = cac.binary add %eu, %e : !cac.field<token, f32>
  %z = cac.binary mul %d, %y : !cac.field<token, f32>
  cac.output "y" %z : !cac.field<token, f32>
}

// -----

// A phase that none after its operands' fits is opened right after them,
// not after every phase so far: the group count of an input comes first, and
// the token output that reads it joins the seq kernel of the group_pos_sum,
// which stores nothing for a third kernel. The broadcast of the group value
// reads the stored group value where it is used.
// CHECK-LABEL: cac.estimator @early_phase {
// CHECK:         %[[G:.*]] = cac.kernel group 0 {
// CHECK:           cac.reduce count
// CHECK:         } : !cac.field<group, f32>
// CHECK-NEXT:    cac.kernel seq 1 {
// CHECK:           %[[S:.*]] = cac.group_pos_sum
// CHECK:           %[[B:.*]] = cac.broadcast %[[G]] : <group, f32> -> <token, f32>
// CHECK:           %[[Y:.*]] = cac.binary mul %[[S]], %[[B]]
// CHECK:           cac.output "y" %[[Y]]
// CHECK-NEXT:    }
// CHECK-NEXT:  }
cac.estimator @early_phase {
  %x = cac.input "x" : !cac.field<token, f32>
  %r = cac.input "r" : !cac.field<seq, f32>
  %s = cac.group_pos_sum %x : !cac.field<token, f32>
  %c = cac.reduce count %r : !cac.field<seq, f32> -> !cac.field<group, f32>
  %c_t = cac.broadcast %c : !cac.field<group, f32> -> !cac.field<token, f32>
  %y = cac.binary mul %s, %c_t : !cac.field<token, f32>
  cac.output "y" %y : !cac.field<token, f32>
}

// -----

// group_pos_sum reads its operand at the group's other members. A map of one
// stored token value and of values each member has (OTB's reward * W; the
// constant 1 of group_pos_count) is computed at the members by the kernel of
// the sums: the scan's kernel stores W alone. A map of two stored values
// (w * w2) is stored as it is.
// CHECK-LABEL: cac.estimator @member_maps {
// CHECK:         %[[K:.*]]:3 = cac.kernel seq 0 {
// CHECK:           %[[W:.*]] = cac.scan
// CHECK:           %[[W2:.*]] = cac.scan
// CHECK:           %[[WW:.*]] = cac.binary mul %[[W]], %[[W2]]
// CHECK:           cac.yield %[[W]], %[[W2]], %[[WW]]
// CHECK:         cac.kernel seq 1 {
// CHECK:           %[[RB:.*]] = cac.broadcast %{{.*}} : <seq, f32> -> <token, f32>
// CHECK:           %[[RW:.*]] = cac.binary mul %[[RB]], %[[K]]#0
// CHECK:           cac.group_pos_sum %[[RW]]
// CHECK:           %[[ONE:.*]] = cac.broadcast %{{.*}} : <scalar, f32> -> <token, f32>
// CHECK:           cac.group_pos_sum %[[ONE]]
// CHECK:           cac.group_pos_sum %[[K]]#2
// CHECK:           cac.binary mul %{{.*}}, %[[K]]#1
cac.estimator @member_maps {
  %x = cac.input "x" : !cac.field<token, f32>
  %r = cac.input "r" : !cac.field<seq, f32>
  %c1 = cac.constant 1.0 : f32 : !cac.field<scalar, f32>
  %one = cac.broadcast %c1 : !cac.field<scalar, f32> -> !cac.field<token, f32>
  %w = cac.scan %x, %one : !cac.field<token, f32>
  %w2 = cac.scan reverse %x, %one : !cac.field<token, f32>
  %rb = cac.broadcast %r : !cac.field<seq, f32> -> !cac.field<token, f32>
  %rw = cac.binary mul %rb, %w : !cac.field<token, f32>
  %s1 = cac.group_pos_sum %rw : !cac.field<token, f32>
  %s2 = cac.group_pos_sum %one : !cac.field<token, f32>
  %ww = cac.binary mul %w, %w2 : !cac.field<token, f32>
  %s3 = cac.group_pos_sum %ww : !cac.field<token, f32>
  %a = cac.binary add %s1, %s2 : !cac.field<token, f32>
  %b = cac.binary add %a, %s3 : !cac.field<token, f32>
  %y = cac.binary mul %b, %w2 : !cac.field<token, f32>
  cac.output "y" %y : !cac.field<token, f32>
}
