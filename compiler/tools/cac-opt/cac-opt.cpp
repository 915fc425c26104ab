//===- cac-opt.cpp - mlir-opt with the cac dialect and passes -------------===//

#include "cac/Driver/Driver.h"
#include "cac/Pipelines.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  cac::registerAllDialects(registry);
  mlir::registerTransformsPasses();
  mlir::registerConversionPasses();
  mlir::registerGPUPasses();
  cac::registerCacPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "cac optimizer driver\n", registry));
}
