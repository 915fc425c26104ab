# Helpers shared by all cac targets.

# LLVM is built without exceptions and HandleLLVMOptions adds -fno-exceptions
# globally. Code that talks to ANTLR or LibTorch needs them back, per target.
function(cac_enable_exceptions target)
  target_compile_options(${target} PRIVATE -fexceptions)
  if(NOT LLVM_ENABLE_RTTI)
    target_compile_options(${target} PRIVATE -frtti)
  endif()
endfunction()

# Generates the ANTLR4 C++ parser for a grammar into ${out_dir}.
# Sets ${prefix}_SOURCES and ${prefix}_INCLUDE_DIR in the parent scope.
function(cac_antlr4_generate prefix grammar out_dir package)
  get_filename_component(name ${grammar} NAME_WE)
  set(outputs
    ${out_dir}/${name}Lexer.cpp ${out_dir}/${name}Lexer.h
    ${out_dir}/${name}Parser.cpp ${out_dir}/${name}Parser.h
    ${out_dir}/${name}Visitor.cpp ${out_dir}/${name}Visitor.h
    ${out_dir}/${name}BaseVisitor.cpp ${out_dir}/${name}BaseVisitor.h)
  add_custom_command(
    OUTPUT ${outputs}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${out_dir}
    COMMAND ${ANTLR4_TOOL} -Dlanguage=Cpp -visitor -no-listener
            -package ${package} -Xexact-output-dir -o ${out_dir} ${grammar}
    DEPENDS ${grammar}
    COMMENT "ANTLR4: generating the ${name} parser"
    VERBATIM)
  set(${prefix}_SOURCES ${out_dir}/${name}Lexer.cpp ${out_dir}/${name}Parser.cpp
      ${out_dir}/${name}Visitor.cpp ${out_dir}/${name}BaseVisitor.cpp PARENT_SCOPE)
  set(${prefix}_INCLUDE_DIR ${out_dir} PARENT_SCOPE)
endfunction()
