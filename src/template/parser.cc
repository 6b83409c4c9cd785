#include "template/parser.h"

#include <algorithm>
#include <initializer_list>

#include "template/lexer.h"

namespace g4::jinja {
namespace {

// Whether a name appears anywhere in an expression or a body (nested bodies included): a for
// loop builds its `loop` object only when its body can read it, which most loops never do.
bool Mentions(const Expr* e, const std::string& name) {
  if (!e) return false;
  if (e->kind == ExprKind::kName && e->name == name) return true;
  for (const ExprPtr& child : e->children)
    if (Mentions(child.get(), name)) return true;
  for (const auto& [key, value] : e->kwargs)
    if (Mentions(value.get(), name)) return true;
  return false;
}

bool Mentions(const Body& body, const std::string& name) {
  for (const NodePtr& node : body) {
    if (Mentions(node->expr.get(), name) || Mentions(node->filter.get(), name) || Mentions(node->else_body, name))
      return true;
    for (const ExprPtr& condition : node->conditions)
      if (Mentions(condition.get(), name)) return true;
    for (const Body& inner : node->bodies)
      if (Mentions(inner, name)) return true;
    for (const MacroParam& param : node->params)
      if (Mentions(param.default_value.get(), name)) return true;
  }
  return false;
}

ExprPtr MakeExpr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Result<Body> ParseAll() {
    std::string found;
    G4_ASSIGN_OR_RETURN(Body body, ParseBody({}, &found));
    return body;
  }

 private:
  // Guards recursion; every recursive parse function holds one.
  struct DepthGuard {
    explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
    ~DepthGuard() { --*depth_; }
    int* depth_;
  };

  const Token& Peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& Next() { return t_[std::min(i_++, t_.size() - 1)]; }
  bool IsOp(const char* op, size_t ahead = 0) const {
    return Peek(ahead).type == TokenType::kOperator && Peek(ahead).text == op;
  }
  bool IsName(const char* name, size_t ahead = 0) const {
    return Peek(ahead).type == TokenType::kName && Peek(ahead).text == name;
  }
  Status Fail(const std::string& message) const {
    return Status::Errorf("line ", Peek().line, ": ", message);
  }
  std::string Describe(const Token& token) const {
    switch (token.type) {
      case TokenType::kBlockEnd: return "end of statement block";
      case TokenType::kVarEnd: return "end of print statement";
      case TokenType::kEnd: return "end of template";
      case TokenType::kText: return "template data";
      default: return "'" + token.text + "'";
    }
  }
  Status Expect(TokenType type, const char* what) {
    if (Peek().type != type) return Fail(Str("expected ", what, ", got ", Describe(Peek())));
    ++i_;
    return OkStatus();
  }
  Status ExpectOp(const char* op) {
    if (!IsOp(op)) return Fail(Str("expected '", op, "', got ", Describe(Peek())));
    ++i_;
    return OkStatus();
  }
  Result<std::string> ExpectName() {
    if (Peek().type != TokenType::kName) return Fail(Str("expected a name, got ", Describe(Peek())));
    return Next().text;
  }
  Status TooDeep() const { return Fail(Str("template nesting is deeper than ", kMaxNestingDepth)); }

  // Parses nodes until a block tag whose first word is one of `ends` (consumed, with the word
  // stored in *found) or, when `ends` is empty, until the end of the template.
  Result<Body> ParseBody(std::initializer_list<const char*> ends, std::string* found) {
    DepthGuard guard(&depth_);
    if (depth_ > kMaxNestingDepth) return TooDeep();
    Body body;
    while (true) {
      const Token& token = Peek();
      if (token.type == TokenType::kEnd) {
        if (ends.size() == 0) return body;
        return Fail(Str("unexpected end of template, expected '", *ends.begin(), "'"));
      }
      if (token.type == TokenType::kText) {
        auto node = std::make_unique<Node>();
        node->kind = NodeKind::kText;
        node->line = token.line;
        node->text = token.text;
        body.push_back(std::move(node));
        ++i_;
      } else if (token.type == TokenType::kVarBegin) {
        auto node = std::make_unique<Node>();
        node->kind = NodeKind::kOutput;
        node->line = token.line;
        ++i_;
        G4_ASSIGN_OR_RETURN(node->expr, ParseTuple());
        G4_RETURN_IF_ERROR(Expect(TokenType::kVarEnd, "'}}'"));
        body.push_back(std::move(node));
      } else if (token.type == TokenType::kBlockBegin) {
        const Token& word = Peek(1);
        if (word.type != TokenType::kName) {
          ++i_;
          return Fail("expected a statement name after '{%'");
        }
        for (const char* end : ends) {
          if (word.text == end) {
            i_ += 2;
            *found = end;
            return body;
          }
        }
        i_ += 2;
        G4_ASSIGN_OR_RETURN(NodePtr node, ParseStatement(word.text, word.line, ends));
        if (node) body.push_back(std::move(node));
      } else {
        return Fail(Str("unexpected ", Describe(token)));
      }
    }
  }

  Result<NodePtr> ParseStatement(const std::string& word, int line, std::initializer_list<const char*> ends) {
    auto node = std::make_unique<Node>();
    node->line = line;
    std::string found;
    if (word == "if") {
      node->kind = NodeKind::kIf;
      while (true) {
        G4_ASSIGN_OR_RETURN(ExprPtr condition, ParseTuple());
        G4_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
        G4_ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, &found));
        node->conditions.push_back(std::move(condition));
        node->bodies.push_back(std::move(body));
        if (found != "elif") break;
      }
      if (found == "else") {
        G4_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
        G4_ASSIGN_OR_RETURN(node->else_body, ParseBody({"endif"}, &found));
      }
    } else if (word == "for") {
      node->kind = NodeKind::kFor;
      G4_RETURN_IF_ERROR(ParseTargets(&node->targets));
      if (!IsName("in")) return Fail(Str("expected 'in', got ", Describe(Peek())));
      ++i_;
      G4_ASSIGN_OR_RETURN(node->expr, ParseTuple(/*with_condition=*/false));
      if (IsName("if")) {
        ++i_;
        G4_ASSIGN_OR_RETURN(node->filter, ParseExpression());
      }
      if (IsName("recursive")) return Fail("recursive loops are not supported");
      G4_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
      node->bodies.emplace_back();
      ++loop_depth_;
      auto loop_body = ParseBody({"endfor", "else"}, &found);
      --loop_depth_;
      if (!loop_body.ok()) return loop_body.status();
      node->bodies[0] = std::move(loop_body).value();
      node->uses_loop = Mentions(node->bodies[0], "loop");
      if (found == "else") {
        G4_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
        G4_ASSIGN_OR_RETURN(node->else_body, ParseBody({"endfor"}, &found));
      }
    } else if (word == "set") {
      G4_ASSIGN_OR_RETURN(std::string first, ExpectName());
      node->targets.push_back(first);
      if (IsOp(".")) {
        ++i_;
        G4_ASSIGN_OR_RETURN(node->attribute, ExpectName());
      } else {
        while (IsOp(",")) {
          ++i_;
          G4_ASSIGN_OR_RETURN(std::string more, ExpectName());
          node->targets.push_back(more);
        }
      }
      if (IsOp("=")) {
        ++i_;
        node->kind = NodeKind::kSet;
        G4_ASSIGN_OR_RETURN(node->expr, ParseTuple());
      } else {
        if (node->targets.size() > 1 || !node->attribute.empty()) return Fail("expected '=' in set");
        node->kind = NodeKind::kSetBlock;
        if (IsOp("|")) { G4_ASSIGN_OR_RETURN(node->filter, ParseFilterChainOnPlaceholder()); }
        G4_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
        node->bodies.emplace_back();
        G4_ASSIGN_OR_RETURN(node->bodies[0], ParseBody({"endset"}, &found));
      }
    } else if (word == "macro") {
      node->kind = NodeKind::kMacro;
      G4_ASSIGN_OR_RETURN(node->name, ExpectName());
      G4_RETURN_IF_ERROR(ParseParams(&node->params));
      G4_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
      node->bodies.emplace_back();
      // A macro is a function: loops around its definition are not its loops.
      const int outer_loops = loop_depth_;
      const bool outer_varargs = uses_varargs_, outer_kwargs = uses_kwargs_;
      loop_depth_ = 0;
      uses_varargs_ = uses_kwargs_ = false;
      auto macro_body = ParseBody({"endmacro"}, &found);
      loop_depth_ = outer_loops;
      node->catch_varargs = uses_varargs_;
      node->catch_kwargs = uses_kwargs_;
      uses_varargs_ = outer_varargs;
      uses_kwargs_ = outer_kwargs;
      if (!macro_body.ok()) return macro_body.status();
      node->bodies[0] = std::move(macro_body).value();
    } else if (word == "call") {
      node->kind = NodeKind::kCallBlock;
      if (IsOp("(")) G4_RETURN_IF_ERROR(ParseParams(&node->params));
      G4_ASSIGN_OR_RETURN(node->expr, ParseExpression());
      if (node->expr->kind != ExprKind::kCall) return Fail("expected a call in the call block");
      G4_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
      node->bodies.emplace_back();
      const int outer_loops = loop_depth_;
      loop_depth_ = 0;
      auto call_body = ParseBody({"endcall"}, &found);
      loop_depth_ = outer_loops;
      if (!call_body.ok()) return call_body.status();
      node->bodies[0] = std::move(call_body).value();
    } else if (word == "filter") {
      node->kind = NodeKind::kFilterBlock;
      G4_ASSIGN_OR_RETURN(node->filter, ParseFilterChainOnPlaceholder(/*leading_pipe=*/false));
      G4_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
      node->bodies.emplace_back();
      G4_ASSIGN_OR_RETURN(node->bodies[0], ParseBody({"endfilter"}, &found));
    } else if (word == "generation") {
      // Hugging Face's AssistantTracker extension: marks assistant text, renders its body.
      node->kind = NodeKind::kScope;
      G4_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
      node->bodies.emplace_back();
      G4_ASSIGN_OR_RETURN(node->bodies[0], ParseBody({"endgeneration"}, &found));
    } else if (word == "break" || word == "continue") {
      if (loop_depth_ == 0) return Fail(Str("'", word, "' outside of a loop"));
      node->kind = word == "break" ? NodeKind::kBreak : NodeKind::kContinue;
    } else {
      std::string message = Str("encountered unknown tag '", word, "'");
      if (ends.size() > 0) message += Str(" (expected '", *ends.begin(), "')");
      return Fail(message);
    }
    G4_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "'%}'"));
    return node;
  }

  Status ParseTargets(std::vector<std::string>* targets) {
    const bool parenthesised = IsOp("(");
    if (parenthesised) ++i_;
    while (true) {
      G4_ASSIGN_OR_RETURN(std::string name, ExpectName());
      targets->push_back(name);
      if (!IsOp(",")) break;
      ++i_;
      if (parenthesised && IsOp(")")) break;
    }
    if (parenthesised) G4_RETURN_IF_ERROR(ExpectOp(")"));
    return OkStatus();
  }

  Status ParseParams(std::vector<MacroParam>* params) {
    G4_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!params->empty()) G4_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      MacroParam param;
      G4_ASSIGN_OR_RETURN(param.name, ExpectName());
      if (IsOp("=")) {
        ++i_;
        G4_ASSIGN_OR_RETURN(param.default_value, ParseExpression());
      } else if (!params->empty() && params->back().default_value) {
        return Fail("non-default argument follows default argument");
      }
      params->push_back(std::move(param));
    }
    ++i_;
    return OkStatus();
  }

  // `| f(args) | g` applied to a placeholder name "caller" (the block's rendered text).
  Result<ExprPtr> ParseFilterChainOnPlaceholder(bool leading_pipe = true) {
    ExprPtr node = MakeExpr(ExprKind::kName, Peek().line);
    node->name = "\x01block";
    if (!leading_pipe) {
      G4_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
    }
    while (IsOp("|")) {
      ++i_;
      G4_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
    }
    return node;
  }

  // An expression, or a tuple when commas follow (a, b).
  Result<ExprPtr> ParseTuple(bool with_condition = true) {
    const int line = Peek().line;
    G4_ASSIGN_OR_RETURN(ExprPtr first, with_condition ? ParseExpression() : ParseOr());
    if (!IsOp(",")) return first;
    ExprPtr tuple = MakeExpr(ExprKind::kTuple, line);
    tuple->children.push_back(std::move(first));
    while (IsOp(",")) {
      ++i_;
      if (Peek().type == TokenType::kBlockEnd || Peek().type == TokenType::kVarEnd || IsOp(")") || IsName("in")) break;
      G4_ASSIGN_OR_RETURN(ExprPtr item, with_condition ? ParseExpression() : ParseOr());
      tuple->children.push_back(std::move(item));
    }
    return tuple;
  }

  Result<ExprPtr> ParseExpression() {
    DepthGuard guard(&depth_);
    if (depth_ > kMaxNestingDepth) return TooDeep();
    const int line = Peek().line;
    G4_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (IsName("if")) {
      ++i_;
      ExprPtr node = MakeExpr(ExprKind::kCondition, line);
      G4_ASSIGN_OR_RETURN(ExprPtr condition, ParseOr());
      ExprPtr otherwise;
      if (IsName("else")) {
        ++i_;
        G4_ASSIGN_OR_RETURN(otherwise, ParseExpression());
      }
      node->children.push_back(std::move(condition));
      node->children.push_back(std::move(expr));
      node->children.push_back(std::move(otherwise));
      expr = std::move(node);
    }
    return expr;
  }

  ExprPtr Binary(const std::string& op, ExprPtr left, ExprPtr right, int line) {
    ExprPtr node = MakeExpr(ExprKind::kBinary, line);
    node->name = op;
    node->children.push_back(std::move(left));
    node->children.push_back(std::move(right));
    return node;
  }

  Result<ExprPtr> ParseOr() {
    G4_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      const int line = Next().line;
      G4_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      left = Binary("or", std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> ParseAnd() {
    G4_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      const int line = Next().line;
      G4_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      left = Binary("and", std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(&depth_);
      if (depth_ > kMaxNestingDepth) return TooDeep();
      ExprPtr node = MakeExpr(ExprKind::kUnary, Next().line);
      node->name = "not";
      G4_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      node->children.push_back(std::move(operand));
      return node;
    }
    return ParseCompare();
  }

  Result<ExprPtr> ParseCompare() {
    const int line = Peek().line;
    G4_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr node;
    while (true) {
      std::string op;
      if (Peek().type == TokenType::kOperator &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == ">" ||
           Peek().text == "<=" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        ++i_;
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        i_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!node) {
        node = MakeExpr(ExprKind::kCompare, line);
        node->children.push_back(std::move(first));
      }
      G4_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      node->ops.push_back(op);
      node->children.push_back(std::move(operand));
    }
    return node ? std::move(node) : std::move(first);
  }

  Result<ExprPtr> ParseMath1() {
    G4_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const Token& op = Next();
      G4_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      left = Binary(op.text, std::move(left), std::move(right), op.line);
    }
    return left;
  }

  Result<ExprPtr> ParseConcat() {
    G4_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
    while (IsOp("~")) {
      const int line = Next().line;
      G4_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
      left = Binary("~", std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> ParseMath2() {
    G4_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& op = Next();
      G4_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      left = Binary(op.text, std::move(left), std::move(right), op.line);
    }
    return left;
  }

  Result<ExprPtr> ParsePow() {
    G4_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      const int line = Next().line;
      G4_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      left = Binary("**", std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> ParseUnary(bool with_filter) {
    DepthGuard guard(&depth_);
    if (depth_ > kMaxNestingDepth) return TooDeep();
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = MakeExpr(ExprKind::kUnary, Peek().line);
      node->name = Next().text;
      G4_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node->children.push_back(std::move(operand));
    } else {
      G4_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    G4_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) { G4_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node))); }
    return node;
  }

  Result<ExprPtr> ParsePrimary() {
    const Token& token = Peek();
    const int line = token.line;
    if (token.type == TokenType::kName) {
      ++i_;
      ExprPtr node = MakeExpr(ExprKind::kLiteral, line);
      if (token.text == "true" || token.text == "True") {
        node->value = Value::Bool(true);
      } else if (token.text == "false" || token.text == "False") {
        node->value = Value::Bool(false);
      } else if (token.text == "none" || token.text == "None") {
        node->value = Value::None();
      } else {
        node->kind = ExprKind::kName;
        node->name = token.text;
        if (token.text == "varargs") uses_varargs_ = true;
        if (token.text == "kwargs") uses_kwargs_ = true;
      }
      return node;
    }
    if (token.type == TokenType::kString) {
      std::string text;
      while (Peek().type == TokenType::kString) text += Next().text;  // adjacent literals join
      ExprPtr node = MakeExpr(ExprKind::kLiteral, line);
      node->value = Value::String(std::move(text));
      return node;
    }
    if (token.type == TokenType::kInt || token.type == TokenType::kFloat) {
      ++i_;
      ExprPtr node = MakeExpr(ExprKind::kLiteral, line);
      node->value = token.type == TokenType::kInt ? Value::Int(token.int_value) : Value::Float(token.float_value);
      return node;
    }
    if (IsOp("(")) {
      ++i_;
      if (IsOp(")")) {
        ++i_;
        return MakeExpr(ExprKind::kTuple, line);
      }
      G4_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple());
      G4_RETURN_IF_ERROR(ExpectOp(")"));
      return inner;
    }
    if (IsOp("[") || IsOp("{")) {
      const bool is_list = IsOp("[");
      ++i_;
      ExprPtr node = MakeExpr(is_list ? ExprKind::kList : ExprKind::kDict, line);
      const char* close = is_list ? "]" : "}";
      while (!IsOp(close)) {
        if (!node->children.empty()) G4_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(close)) break;
        G4_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
        node->children.push_back(std::move(item));
        if (!is_list) {
          G4_RETURN_IF_ERROR(ExpectOp(":"));
          G4_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
          node->children.push_back(std::move(value));
        }
      }
      ++i_;
      return node;
    }
    return Fail(Str("unexpected ", Describe(token)));
  }

  Result<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        const int line = Next().line;
        if (Peek().type == TokenType::kName) {
          ExprPtr attribute = MakeExpr(ExprKind::kAttribute, line);
          attribute->name = Next().text;
          attribute->children.push_back(std::move(node));
          node = std::move(attribute);
        } else if (Peek().type == TokenType::kInt) {
          ExprPtr subscript = MakeExpr(ExprKind::kSubscript, line);
          ExprPtr index = MakeExpr(ExprKind::kLiteral, line);
          index->value = Value::Int(Next().int_value);
          subscript->children.push_back(std::move(node));
          subscript->children.push_back(std::move(index));
          node = std::move(subscript);
        } else {
          return Fail("expected a name after '.'");
        }
      } else if (IsOp("[")) {
        G4_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        G4_ASSIGN_OR_RETURN(node, ParseCall(std::move(node), ExprKind::kCall, ""));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> ParseSubscript(ExprPtr target) {
    const int line = Next().line;  // '['
    std::vector<ExprPtr> parts;
    bool is_slice = false;
    if (!IsOp(":")) {
      G4_ASSIGN_OR_RETURN(ExprPtr index, ParseExpression());
      if (!IsOp(":")) {
        G4_RETURN_IF_ERROR(ExpectOp("]"));
        ExprPtr node = MakeExpr(ExprKind::kSubscript, line);
        node->children.push_back(std::move(target));
        node->children.push_back(std::move(index));
        return node;
      }
      parts.push_back(std::move(index));
    } else {
      parts.push_back(nullptr);
    }
    is_slice = true;
    ++i_;  // ':'
    if (IsOp("]") || IsOp(":")) {
      parts.push_back(nullptr);
    } else {
      G4_ASSIGN_OR_RETURN(ExprPtr stop, ParseExpression());
      parts.push_back(std::move(stop));
    }
    if (IsOp(":")) {
      ++i_;
      if (IsOp("]")) {
        parts.push_back(nullptr);
      } else {
        G4_ASSIGN_OR_RETURN(ExprPtr step, ParseExpression());
        parts.push_back(std::move(step));
      }
    } else {
      parts.push_back(nullptr);
    }
    G4_RETURN_IF_ERROR(ExpectOp("]"));
    ExprPtr node = MakeExpr(is_slice ? ExprKind::kSlice : ExprKind::kSubscript, line);
    node->children.push_back(std::move(target));
    for (auto& part : parts) node->children.push_back(std::move(part));
    return node;
  }

  // Parses "(args, k=v)" into node->children[1..] and kwargs; children[0] is `target`.
  Result<ExprPtr> ParseCall(ExprPtr target, ExprKind kind, std::string name) {
    ExprPtr node = MakeExpr(kind, Peek().line);
    node->name = std::move(name);
    node->children.push_back(std::move(target));
    if (!IsOp("(")) return node;
    ++i_;
    bool first = true;
    while (!IsOp(")")) {
      if (!first) G4_RETURN_IF_ERROR(ExpectOp(","));
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) return Fail("*args and **kwargs in calls are not supported");
      if (Peek().type == TokenType::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        ++i_;
        G4_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        node->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!node->kwargs.empty()) return Fail("positional argument follows keyword argument");
        G4_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        node->children.push_back(std::move(value));
      }
    }
    ++i_;
    return node;
  }

  Result<std::string> ParseDottedName() {
    G4_ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (IsOp(".")) {
      ++i_;
      G4_ASSIGN_OR_RETURN(std::string part, ExpectName());
      name += "." + part;
    }
    return name;
  }

  Result<ExprPtr> ParseFilter(ExprPtr target) {
    G4_ASSIGN_OR_RETURN(std::string name, ParseDottedName());
    return ParseCall(std::move(target), ExprKind::kFilter, name);
  }

  Result<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        ++i_;
        G4_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
      } else if (IsName("is")) {
        ++i_;
        bool negated = false;
        if (IsName("not")) {
          ++i_;
          negated = true;
        }
        G4_ASSIGN_OR_RETURN(std::string name, ParseDottedName());
        const int line = Peek().line;
        if (IsOp("(")) {
          G4_ASSIGN_OR_RETURN(node, ParseCall(std::move(node), ExprKind::kTest, name));
        } else {
          ExprPtr test = MakeExpr(ExprKind::kTest, line);
          test->name = name;
          test->children.push_back(std::move(node));
          const Token& next = Peek();
          const bool starts_argument =
              next.type == TokenType::kName || next.type == TokenType::kString || next.type == TokenType::kInt ||
              next.type == TokenType::kFloat || IsOp("[") || IsOp("{");
          if (starts_argument && !IsName("else") && !IsName("or") && !IsName("and")) {
            if (IsName("is")) return Fail("you cannot chain multiple tests with is");
            G4_ASSIGN_OR_RETURN(ExprPtr argument, ParsePrimary());
            G4_ASSIGN_OR_RETURN(argument, ParsePostfix(std::move(argument)));
            test->children.push_back(std::move(argument));
          }
          node = std::move(test);
        }
        node->negated = negated;
      } else if (IsOp("(")) {
        G4_ASSIGN_OR_RETURN(node, ParseCall(std::move(node), ExprKind::kCall, ""));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  bool uses_varargs_ = false;  // the macro being parsed reads `varargs` / `kwargs`
  bool uses_kwargs_ = false;
};

}  // namespace

Result<Body> ParseTemplate(std::string_view source) {
  G4_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  return Parser(std::move(tokens)).ParseAll();
}

}  // namespace g4::jinja
