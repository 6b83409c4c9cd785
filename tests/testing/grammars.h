// Grammars for the constrained-decoding tests: automata from GBNF or a JSON schema (a failure to
// compile is a test failure), and a schema whose outputs an independent parser checks.
#pragma once

#include <memory>
#include <string>

#include "grammar/recognizer.h"

namespace g4 {

// The GBNF of a JSON schema ("root ::= \"x\"" after recording a failure).
std::string SchemaGbnf(const std::string& schema);
std::shared_ptr<grammar::Automaton> GbnfAutomaton(const std::string& gbnf);
std::shared_ptr<grammar::Automaton> SchemaAutomaton(const std::string& schema);

// An object with a bounded string, a bounded integer, an optional e-mail, an optional enum array
// of at most 3 items and a boolean; no other keys.
extern const char* const kPersonSchema;
// Fails the test unless `text` is JSON that keeps kPersonSchema's promises (read by nlohmann).
void CheckPerson(const std::string& text);

}  // namespace g4
