# dynamo.explain() and dynamo-explain on the same program (tests/python/test_explain_consistency.py):
# a break in a callee met on every pass of a loop (main itself runs eagerly: the break is in its
# loop). Both must group the breaks and count their occurrences the same way (storage::BreakTally):
# 5, one per pass, though main's, outer's and helper's compiles each recorded the break.
import torch


def helper(x):
    y = x + 1
    if y.sum() > 0:
        return y * 2
    return y


def outer(x):
    return helper(x * 3) - 1


def main():
    x = torch.ones(3)
    for _ in range(5):
        x = outer(x)
    print("done")
    return x


if __name__ == "__main__":
    main()
