# dynamo-explain end-to-end input: a syntax error on line 4.
import torch

def f(x)
    return x
