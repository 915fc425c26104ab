// The cac language: advantage estimators, segmentation rules and objectives.
// See docs/language.md. Domain names (token, seq, group, ...) are not keywords:
// `group` is also the name of the grouping input.
grammar Cac;

file
  : importDecl* estimatorDecl EOF
  ;

importDecl
  : 'import' STRING 'as' ID ';'?
  ;

estimatorDecl
  : kind=('estimator' | 'objective') ID '{' stmt* '}'
  ;

stmt
  : 'input' ID ':' ID ';'?                       # inputStmt
  | 'param' ID ('=' number)? ';'?                 # paramStmt
  | 'let' ID (':' ID)? '=' expr ';'?              # letStmt
  | 'output' ID ':' ID '=' expr ';'?              # outputStmt
  | 'segments' '=' expr ';'?                      # segmentsStmt
  | 'loss' '(' ID (',' lossOption)* ')' '=' expr ';'?   # lossStmt
  ;

// `mask = PREDICATE` or `aggregation = "MODE"` (docs/language.md, Objectives).
lossOption
  : ID '=' (STRING | expr)
  ;

number
  : '-'? NUMBER
  ;

expr
  : '(' expr ')'                                  # parenExpr
  | NUMBER                                        # numberExpr
  | ('true' | 'false')                            # boolExpr
  | ID '(' (arg (',' arg)*)? ')'                  # callExpr
  | ID ('.' ID)?                                  # nameExpr
  | op='-' expr                                   # negExpr
  | expr op=('*' | '/') expr                      # mulExpr
  | expr op=('+' | '-') expr                      # addExpr
  | expr op=('<' | '<=' | '>' | '>=' | '==' | '!=') expr   # cmpExpr
  | op='not' expr                                 # notExpr
  | expr op='and' expr                            # andExpr
  | expr op='or' expr                             # orExpr
  ;

arg
  : (ID '=')? expr
  ;

NUMBER
  : DIGIT+ ('.' DIGIT*)? EXPONENT?
  | '.' DIGIT+ EXPONENT?
  ;
fragment DIGIT : [0-9] ;
fragment EXPONENT : [eE] [+-]? DIGIT+ ;

STRING : '"' (~["\\\r\n] | '\\' .)* '"' ;
ID : [a-zA-Z_] [a-zA-Z_0-9]* ;
COMMENT : '#' ~[\r\n]* -> skip ;
LINE_COMMENT : '//' ~[\r\n]* -> skip ;
WS : [ \t\r\n]+ -> skip ;
