// Inputs of test/Conversion/cpu-log.test: f32 logs in a loop that carries a
// reassociable sum (expanded), in a loop that carries a scan (kept), outside
// loops (kept), of a vector (expanded), and an f64 log (kept).
func.func @sum(%n: index) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %z) -> (f32) {
    %k = arith.index_cast %i : index to i64
    %x = arith.sitofp %k : i64 to f32
    %l = math.log %x : f32
    %a = arith.addf %acc, %l fastmath<reassoc> : f32
    scf.yield %a : f32
  }
  return %s : f32
}

func.func @scan(%n: index) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %h = arith.constant 0.5 : f32
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%y = %z) -> (f32) {
    %k = arith.index_cast %i : index to i64
    %x = arith.sitofp %k : i64 to f32
    %l = math.log %x : f32
    %m = arith.mulf %h, %y : f32
    %a = arith.addf %l, %m : f32
    scf.yield %a : f32
  }
  return %s : f32
}

func.func @other(%a: f32, %v: vector<8xf32>, %d: f64) -> (f32, vector<8xf32>, f64) {
  %0 = math.log %a : f32
  %1 = math.log %v : vector<8xf32>
  %2 = math.log %d : f64
  return %0, %1, %2 : f32, vector<8xf32>, f64
}
