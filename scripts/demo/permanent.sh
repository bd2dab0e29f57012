#!/bin/bash
# Fails the same way every time: a missing Python module (a permanent error).
python3 -c 'import a_module_that_does_not_exist'
