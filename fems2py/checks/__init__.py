"""Parts of the semantic checker (fems2py.checker): code files, graph algorithms, flows."""
