// switchyard-cli: see admin/cli.hpp and the README's "Admin CLI" section.

#include "admin/cli.hpp"

#include <iostream>

int main(int argc, char** argv) { return switchyard::admin::run(argc, argv, std::cin, std::cout, std::cerr); }
