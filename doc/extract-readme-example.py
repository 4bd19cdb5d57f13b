#!/usr/bin/env python3
"""Write the README's complete C example (the first ```c block that
starts with an #include) to a file, so the build compiles and runs it."""
import sys

text = open(sys.argv[1], encoding="utf-8").read()
start = text.index("```c\n#include") + len("```c\n")
with open(sys.argv[2], "w", encoding="utf-8") as out:
    out.write(text[start:text.index("```", start)])
