"""Adversarial pass 2 (issue #7), continued from test_adversarial_realmodels.py: real model code
with loops over time and reductions, written the way public projects write it (unrolled RNNs,
decoding loops, losses with reduction options), compared with eager exactly by
adversarial_harness (outputs bitwise, gradients, buffers, optimizer state and Python side
effects, over several calls with `torch.manual_seed` reseeded before each call)."""
import random

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from adversarial_harness import check_case, params, registry
from test_adversarial_realmodels import _grads, _params

CASES, case = registry()


# ----------------------------------------------------------------------------------------------
# RNNs unrolled over time
# ----------------------------------------------------------------------------------------------

class UnrolledLSTM(nn.Module):
    def __init__(self, d=3, h=4):
        super().__init__()
        self.cell = nn.LSTMCell(d, h)
        self.out = nn.Linear(h, 2)
        self.h = h

    def forward(self, x, state=None):
        T, B = x.shape[0], x.shape[1]
        if state is None:
            hx = torch.zeros(B, self.h)
            cx = torch.zeros(B, self.h)
        else:
            hx, cx = state
        outs = []
        for t in range(T):
            hx, cx = self.cell(x[t], (hx, cx))
            outs.append(hx)
        return self.out(torch.stack(outs)), (hx, cx)


@case
def lstm_cell_unrolled_python_loop_tbptt_detach():
    m = UnrolledLSTM()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    carry = {"state": None}

    def tbptt_step(x, y):
        opt.zero_grad()
        out, state = m(x, carry["state"])
        carry["state"] = tuple(s.detach() for s in state)
        loss = F.mse_loss(out, y)
        loss.backward()
        opt.step()
        return loss.item()

    def drive(f, i):
        T = [3, 3, 5][i]
        return f(torch.randn(T, 2, 3), torch.randn(T, 2, 2))
    return tbptt_step, drive, lambda: (_params(m), carry["state"])


class MaskedGRU(nn.Module):
    def __init__(self, d=3, h=4):
        super().__init__()
        self.cell = nn.GRUCell(d, h)
        self.h = h

    def forward(self, x, lengths, reverse=False):
        B, T, _ = x.shape
        h = x.new_zeros(B, self.h)
        outs = [None] * T
        steps = reversed(range(T)) if reverse else range(T)
        for t in steps:
            h_new = self.cell(x[:, t], h)
            mask = (t < lengths).unsqueeze(1)
            h = torch.where(mask, h_new, h)
            outs[t] = h * mask
        return torch.stack(outs, 1), h


@case
def gru_cell_masked_by_lengths_bidirectional():
    fw, bw = MaskedGRU(), MaskedGRU()

    def fn(x, lengths):
        o1, h1 = fw(x, lengths)
        o2, h2 = bw(x, lengths, reverse=True)
        return torch.cat([o1, o2], -1), torch.cat([h1, h2], -1)

    def drive(f, i):
        fw.zero_grad()
        bw.zero_grad()
        lengths = torch.tensor([4, 2 + i, 1])
        o, h = f(torch.randn(3, 4, 3), lengths)
        (o.sum() + h.sum()).backward()
        return o, h, _grads(fw), _grads(bw)
    return fn, drive


class Seq2SeqTF(nn.Module):
    def __init__(self, vocab=7, h=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, h)
        self.rnn = nn.RNNCell(h, h, nonlinearity="tanh")
        self.out = nn.Linear(h, vocab)

    def forward(self, h, target, teacher_forcing_ratio=0.5):
        B, T = target.shape
        inp = target[:, 0]
        outputs = torch.zeros(B, T, self.out.out_features)
        used_tf = []
        for t in range(1, T):
            h = self.rnn(self.emb(inp), h)
            logits = self.out(h)
            outputs[:, t] = logits
            teacher_force = random.random() < teacher_forcing_ratio
            used_tf.append(teacher_force)
            top1 = logits.argmax(1)
            inp = target[:, t] if teacher_force else top1
        return outputs, used_tf


@case
def rnn_teacher_forcing_python_random_and_inplace_output_buffer():
    m = Seq2SeqTF()

    def drive(f, i):
        m.zero_grad()
        tgt = torch.randint(0, 7, (2, 5))
        out, used = f(torch.zeros(2, 4), tgt, teacher_forcing_ratio=[0.5, 1.0, 0.0][i])
        F.cross_entropy(out[:, 1:].reshape(-1, 7), tgt[:, 1:].reshape(-1)).backward()
        return out, used, _grads(m)
    return m, drive


@case
def packed_sequence_gru_with_lengths():
    m = nn.GRU(3, 4, batch_first=True, bidirectional=True)

    def fn(x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, h = m(packed)
        out, out_lens = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return out, h, out_lens

    def drive(f, i):
        m.zero_grad()
        out, h, lens = f(torch.randn(3, 5, 3), torch.tensor([5, 2 + i, 3]))
        out.sum().backward()
        return out, h, lens, _grads(m)
    return fn, drive


# ----------------------------------------------------------------------------------------------
# decoding loops
# ----------------------------------------------------------------------------------------------

class TinyLM(nn.Module):
    def __init__(self, vocab=9, d=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.rnn = nn.GRUCell(d, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tok, h):
        h = self.rnn(self.emb(tok), h)
        return self.head(h).log_softmax(-1), h


@case
def beam_search_topk_flattened_python_bookkeeping_early_stop():
    lm = TinyLM()
    eos, beams = 2, 3

    @torch.no_grad()
    def beam_search(h0, max_len):
        seqs = [[0]]
        scores = torch.zeros(1)
        h = h0
        finished = []
        for step in range(max_len):
            tok = torch.tensor([s[-1] for s in seqs])
            logp, h = lm(tok, h)
            cand = (scores[:, None] + logp).view(-1)
            top_scores, top_idx = cand.topk(beams)
            vocab = logp.size(-1)
            new_seqs, keep, new_scores = [], [], []
            for sc, idx in zip(top_scores.tolist(), top_idx.tolist()):
                b, w = idx // vocab, idx % vocab
                if w == eos:
                    finished.append((sc / (len(seqs[b]) + 1), seqs[b] + [w]))
                else:
                    new_seqs.append(seqs[b] + [w])
                    keep.append(b)
                    new_scores.append(sc)
            if len(finished) >= beams or not new_seqs:
                break
            seqs, scores, h = new_seqs, torch.tensor(new_scores), h[torch.tensor(keep)]
        finished.sort(key=lambda t: -t[0])
        return finished[:beams], seqs

    return beam_search, lambda f, i: f(torch.randn(1, 4) * (i + 1), 4 + i)


@case
def top_k_top_p_sampling_multinomial_with_repetition_penalty():
    lm = TinyLM()

    def top_k_top_p_filtering(logits, top_k=0, top_p=1.0, filter_value=-float("Inf")):
        if top_k > 0:
            top_k = min(max(top_k, 1), logits.size(-1))
            indices_to_remove = logits < torch.topk(logits, top_k)[0][..., -1, None]
            logits = logits.masked_fill(indices_to_remove, filter_value)
        if top_p < 1.0:
            sorted_logits, sorted_indices = torch.sort(logits, descending=True)
            cumulative_probs = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
            sorted_indices_to_remove = cumulative_probs > top_p
            sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
            sorted_indices_to_remove[..., 0] = 0
            indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
            logits = logits.masked_fill(indices_to_remove, filter_value)
        return logits

    @torch.no_grad()
    def sample(input_ids, steps, top_k, top_p, penalty=1.3, temperature=0.8):
        h = torch.zeros(input_ids.shape[0], 4)
        for t in range(input_ids.shape[1]):
            logp, h = lm(input_ids[:, t], h)
        for _ in range(steps):
            logits = logp / temperature
            score = torch.gather(logits, 1, input_ids)
            score = torch.where(score < 0, score * penalty, score / penalty)
            logits = logits.scatter(1, input_ids, score)
            logits = top_k_top_p_filtering(logits, top_k=top_k, top_p=top_p)
            nxt = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            input_ids = torch.cat([input_ids, nxt], dim=-1)
            logp, h = lm(nxt.squeeze(1), h)
        return input_ids

    cfg = [(3, 4, 0.9), (4, 0, 0.7), (2, 5, 1.0)]
    return sample, lambda f, i: f(torch.randint(0, 9, (2, 2)), *cfg[i])


@case
def greedy_decode_batched_with_finished_mask_and_item_early_stop():
    lm = TinyLM()

    @torch.no_grad()
    def greedy(h, max_len, eos=3, pad=0):
        B = h.shape[0]
        tok = torch.ones(B, dtype=torch.long)
        unfinished = torch.ones(B, dtype=torch.long)
        out = [tok]
        for _ in range(max_len):
            logp, h = lm(tok, h)
            nxt = logp.argmax(-1)
            nxt = nxt * unfinished + pad * (1 - unfinished)
            out.append(nxt)
            unfinished = unfinished.mul((nxt != eos).long())
            tok = nxt
            if unfinished.max() == 0:
                break
        return torch.stack(out, 1), len(out)

    return greedy, lambda f, i: f(torch.randn(3, 4) * (1 + 2 * i), 3 + 3 * i)


# ----------------------------------------------------------------------------------------------
# losses with reduction options
# ----------------------------------------------------------------------------------------------

class LabelSmoothingCE(nn.Module):
    def __init__(self, smoothing=0.1, ignore_index=-100, reduction="mean"):
        super().__init__()
        self.smoothing, self.ignore_index, self.reduction = smoothing, ignore_index, reduction

    def forward(self, logits, target):
        logp = F.log_softmax(logits, dim=-1)
        pad = target.eq(self.ignore_index)
        t = target.masked_fill(pad, 0)
        nll = -logp.gather(dim=-1, index=t.unsqueeze(-1)).squeeze(-1)
        smooth = -logp.mean(dim=-1)
        loss = (1.0 - self.smoothing) * nll + self.smoothing * smooth
        loss = loss.masked_fill(pad, 0.0)
        if self.reduction == "sum":
            return loss.sum()
        if self.reduction == "mean":
            return loss.sum() / (~pad).sum().clamp(min=1)
        return loss


@case
def label_smoothing_ce_ignore_index_reduction_strings():
    m = LabelSmoothingCE()
    logits = nn.Parameter(torch.randn(2, 5, 6))

    def drive(f, i):
        outs = []
        for red in ("mean", "sum", "none"):
            m.reduction = red
            logits.grad = None
            tgt = torch.randint(0, 6, (2, 5))
            tgt[:, -1 - i:] = -100
            if i == 2:
                tgt[:] = -100                       # all ignored
            l = f(logits, tgt)
            l.sum().backward()
            ref = F.cross_entropy(logits.detach().view(-1, 6), tgt.view(-1), ignore_index=-100,
                                  label_smoothing=0.1, reduction=red)
            outs.append((red, l, logits.grad, ref))
        return outs
    return m, drive


class FocalLoss(nn.Module):
    def __init__(self, alpha=0.25, gamma=2.0, reduction="mean"):
        super().__init__()
        self.alpha, self.gamma, self.reduction = alpha, gamma, reduction

    def forward(self, inputs, targets):
        p = torch.sigmoid(inputs)
        ce = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
        p_t = p * targets + (1 - p) * (1 - targets)
        loss = ce * ((1 - p_t) ** self.gamma)
        if self.alpha >= 0:
            loss = (self.alpha * targets + (1 - self.alpha) * (1 - targets)) * loss
        if self.reduction == "none":
            pass
        elif self.reduction == "mean":
            loss = loss.mean()
        elif self.reduction == "sum":
            loss = loss.sum()
        else:
            raise ValueError(f"Invalid Value for arg 'reduction': '{self.reduction} \n "
                             f"Supported reduction modes: 'none', 'mean', 'sum'")
        return loss


@case
def focal_loss_reduction_modes_and_invalid_mode_raises():
    m = FocalLoss()

    def drive(f, i):
        m.reduction, m.alpha, m.gamma = [("mean", 0.25, 2.0), ("none", -1, 0.0), ("bogus", 0.5, 1.5)][i]
        return f(torch.randn(4, 3), (torch.rand(4, 3) > 0.5).float())
    return m, drive


@case
def nll_class_weights_cross_entropy_probs_and_kl_distillation():
    w = torch.tensor([1.0, 2.0, 0.5, 1.0])

    def fn(student, teacher, y, T):
        hard = F.cross_entropy(student, y, weight=w, ignore_index=1)
        nll = F.nll_loss(F.log_softmax(student, -1), y, weight=w, reduction="sum")
        soft = F.kl_div(F.log_softmax(student / T, dim=-1), F.softmax(teacher / T, dim=-1), reduction="batchmean") * (T * T)
        probs_ce = F.cross_entropy(student, F.softmax(teacher, -1))
        return hard, nll, soft, probs_ce

    def drive(f, i):
        s = torch.randn(5, 4, requires_grad=True)
        y = torch.randint(0, 4, (5,))
        if i == 1:
            y[:] = 1
        out = f(s, torch.randn(5, 4), y, float(i + 1))
        torch.stack(out).nan_to_num().sum().backward()
        return out, s.grad
    return fn, drive


@case
def triplet_batch_hard_mining_and_dice_loss():
    def fn(emb, labels, margin, pred, target, smooth=1.0):
        d = torch.cdist(emb, emb)
        same = labels[:, None] == labels[None, :]
        hardest_pos = (d * same.float()).max(1)[0]
        max_d = d.max(1, keepdim=True)[0]
        hardest_neg = (d + max_d * same.float()).min(1)[0]
        triplet = F.relu(hardest_pos - hardest_neg + margin).mean()
        p = pred.sigmoid().flatten(1)
        t = target.flatten(1)
        inter = (p * t).sum(1)
        dice = 1 - (2.0 * inter + smooth) / (p.sum(1) + t.sum(1) + smooth)
        return triplet, dice.mean()

    def drive(f, i):
        emb = torch.randn(6, 3, requires_grad=True)
        pred = torch.randn(2, 1, 3, 3, requires_grad=True)
        out = f(emb, torch.tensor([0, 1, 0, 1, 2, 2]), 0.2 * (i + 1), pred, (torch.rand(2, 1, 3, 3) > 0.5).float())
        sum(out).backward()
        return out, emb.grad, pred.grad
    return fn, drive


@case
def ctc_loss_and_smooth_l1_huber_beta():
    def fn(log_probs, targets, in_lens, tgt_lens, a, b, beta):
        ctc = F.ctc_loss(log_probs, targets, in_lens, tgt_lens, blank=0, reduction="mean", zero_infinity=True)
        return ctc, F.smooth_l1_loss(a, b, beta=beta), F.huber_loss(a, b, delta=beta, reduction="sum")

    def drive(f, i):
        lp = torch.randn(6, 2, 5).log_softmax(2).detach().requires_grad_()
        tg = torch.randint(1, 5, (2, 3))
        out = f(lp, tg, torch.tensor([6, 5]), torch.tensor([3, 2 + (i == 1)]), torch.randn(4), torch.randn(4),
                [1.0, 0.5, 0.0][i])
        out[0].backward()
        return out, lp.grad
    return fn, drive


# ----------------------------------------------------------------------------------------------

XFAIL = {}


@pytest.mark.parametrize("case", params(CASES, XFAIL))
def test_adversarial_realmodels_loops(case):
    check_case(case)
