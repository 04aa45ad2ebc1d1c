"""Adversarial pass (issue #7), category a: dict / list / OrderedDict / namedtuple / dataclass
outputs, HuggingFace-style ModelOutput dict subclasses, nested containers. Each case is compared
with eager call by call (see adversarial_harness)."""
import collections
import dataclasses
from collections import OrderedDict
from typing import Optional, Tuple

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from adversarial_harness import check_case, params, registry

CASES, case = registry()


# --- HuggingFace-style ModelOutput (transformers.utils.generic.ModelOutput, simplified) ----------
class ModelOutput(OrderedDict):
    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None:
                self[f.name] = v

    def __getitem__(self, k):
        if isinstance(k, str):
            inner_dict = dict(self.items())
            return inner_dict[k]
        return self.to_tuple()[k]

    def __setattr__(self, name, value):
        if name in self.keys() and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class BaseModelOutput(ModelOutput):
    last_hidden_state: torch.Tensor = None
    hidden_states: Optional[Tuple[torch.Tensor]] = None
    attentions: Optional[Tuple[torch.Tensor]] = None


@dataclasses.dataclass
class SequenceClassifierOutput(ModelOutput):
    loss: Optional[torch.Tensor] = None
    logits: torch.Tensor = None


class TinyEncoder(nn.Module):
    def __init__(self, d=8, layers=2):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))

    def forward(self, x, output_hidden_states=False, return_dict=True):
        all_hidden = () if output_hidden_states else None
        for layer in self.layers:
            if output_hidden_states:
                all_hidden = all_hidden + (x,)
            x = torch.tanh(layer(x))
        if not return_dict:
            return tuple(v for v in [x, all_hidden] if v is not None)
        return BaseModelOutput(last_hidden_state=x, hidden_states=all_hidden)


@case
def hf_dataclass_output_return_dict():
    m = TinyEncoder()
    x = torch.randn(2, 8)

    def drive(f, i):
        out = f(x, output_hidden_states=(i != 1))
        return out, list(out.keys()), out.last_hidden_state, out[0], out.to_tuple()
    return m, drive


@case
def hf_return_dict_false_tuple():
    m = TinyEncoder()
    x = torch.randn(2, 8)

    def drive(f, i):
        return f(x, output_hidden_states=bool(i % 2), return_dict=False)
    return m, drive


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = TinyEncoder()
        self.head = nn.Linear(8, 3)

    def forward(self, x, labels=None):
        outputs = self.enc(x)
        logits = self.head(outputs[0])
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)


@case
def hf_classifier_optional_loss():
    m = Classifier()
    x = torch.randn(4, 8)
    labels = torch.tensor([0, 1, 2, 1])

    def drive(f, i):
        out = f(x, labels if i != 1 else None)
        return out, list(out.keys()), out.loss, out["logits"]
    return m, drive


@case
def hf_output_set_attr_after_construction():
    # transformers code often does `outputs.loss = loss` on an output created earlier
    def fn(x):
        out = SequenceClassifierOutput(logits=x * 2)
        out.loss = x.sum()
        return out
    x = torch.randn(3)
    return fn, lambda f, i: (lambda o: (o, list(o.keys()), o.loss))(f(x + i))


class AttrDict(dict):
    """The config/output dict many research repos use."""
    __getattr__ = dict.__getitem__
    __setattr__ = dict.__setitem__


@case
def attrdict_output():
    def fn(x):
        out = AttrDict()
        out.feat = x.relu()
        out["score"] = out.feat.sum(-1)
        return out
    x = torch.randn(2, 4)
    return fn, lambda f, i: f(x * (i - 1))


@case
def dict_key_order_insertion():
    def fn(x):
        d = {}
        d["z"] = x + 1
        d["a"] = x - 1
        d["m"] = x * 2
        del d["a"]
        d["a"] = x
        return d
    x = torch.randn(3)
    return fn, lambda f, i: f(x)


@case
def ordered_dict_move_to_end():
    def fn(x):
        d = OrderedDict(a=x, b=x + 1, c=x + 2)
        d.move_to_end("a")
        d.move_to_end("c", last=False)
        return d
    x = torch.randn(3)
    return fn, lambda f, i: f(x)


Detection = collections.namedtuple("Detection", ["boxes", "scores", "labels"])


@case
def namedtuple_replace_asdict():
    def fn(x):
        det = Detection(x[:, :4], x[:, 4].sigmoid(), x[:, 5].long())
        det = det._replace(scores=det.scores * 2)
        return det, det._asdict()
    x = torch.randn(5, 6) * 3
    return fn, lambda f, i: f(x + i)


@case
def nested_dict_list_tuple():
    def fn(a, b):
        return {"enc": [a, (a + b, b * 2)], "dec": {"x": a @ b.T, "y": [b, [a]]}, "n": 3}
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    return fn, lambda f, i: f(a, b + i)


@case
def same_tensor_twice_identity():
    def fn(x):
        y = x * 2
        return [y, y, x]

    def drive(f, i):
        out = f(xs[i])
        return out, out[0] is out[1], out[2] is xs[i]
    xs = [torch.randn(3) for _ in range(3)]
    return fn, drive


@case
def input_dict_updated_in_place():
    def fn(batch):
        batch["y"] = batch["x"] * 2
        batch.setdefault("mask", torch.ones_like(batch["x"]))
        batch.pop("drop", None)
        return batch
    batches = [{"x": torch.randn(3), "drop": 1}, {"x": torch.randn(3)},
               {"mask": torch.zeros(3), "x": torch.randn(3), "drop": 2}]

    def drive(f, i):
        out = f(batches[i])
        return out, out is batches[i]
    return fn, drive, lambda: batches


@case
def defaultdict_list_output():
    def fn(feats):
        groups = collections.defaultdict(list)
        for name, t in feats:
            groups[name.split(".")[0]].append(t.mean())
        return groups
    feats = [("a.1", torch.randn(3)), ("b.1", torch.randn(3)), ("a.2", torch.randn(3))]
    return fn, lambda f, i: f(feats)


@case
def mixed_tuple_none_int_str():
    def fn(x):
        return x.relu(), None, x.shape[0], "ok", 1.5, (x.dim(), x.dtype)
    x = torch.randn(4, 2)
    return fn, lambda f, i: f(x)


@case
def return_types_max_namedtuple():
    def fn(x):
        r = x.max(dim=1)
        s = torch.sort(x, dim=1, descending=True)
        return r, s, r.values + 1, s[1]
    x = torch.randn(3, 4)
    return fn, lambda f, i: f(x * (i + 1))


@case
def dict_merge_operators():
    def fn(x, extra):
        base = {"a": x, "b": x + 1}
        merged = {**base, **extra, "a": x * 3}
        merged2 = base | {"c": x - 1}
        base.update(d=x, b=x * 0)
        return merged, merged2, base
    x = torch.randn(2)

    def drive(f, i):
        return f(x, {"e": x + 10, "b": x} if i != 1 else {})
    return fn, drive


@dataclasses.dataclass
class DetrOutput:
    logits: torch.Tensor
    pred_boxes: torch.Tensor
    aux: list = dataclasses.field(default_factory=list)


@case
def plain_dataclass_output():
    def fn(x):
        out = DetrOutput(logits=x.softmax(-1), pred_boxes=x.sigmoid())
        out.aux.append(x.mean())
        return out
    x = torch.randn(2, 4)
    return fn, lambda f, i: f(x + i)


class BoxList(collections.namedtuple("BoxList", ["boxes", "size"])):
    @property
    def area(self):
        b = self.boxes
        return (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])

    def scale(self, s):
        return BoxList(self.boxes * s, self.size)


@case
def namedtuple_subclass_with_methods():
    def fn(b):
        bl = BoxList(b, (10, 10))
        return bl.scale(2).area, bl.scale(0.5)
    b = torch.rand(3, 4)
    return fn, lambda f, i: f(b + i)


@case
def split_chunk_unbind_containers():
    def fn(x):
        a = torch.split(x, 2)
        b = list(torch.chunk(x, 3, dim=1))
        c = x.unbind(0)
        return a, b, c, dict(zip(["p", "q", "r"], c))
    x = torch.randn(4, 3)
    return fn, lambda f, i: f(x)


@case
def dict_comprehension_from_named_parameters():
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))

    def fn(x):
        norms = {n: p.norm() for n, p in m.named_parameters() if "weight" in n}
        return m(x), norms
    x = torch.randn(2, 3)
    return fn, lambda f, i: f(x)


@case
def tuple_of_lists_mutated_after_return():
    # a list returned by the compiled function must be a fresh, mutable list
    def fn(x):
        return [x + 1, x + 2], {"k": [x]}

    def drive(f, i):
        a, d = f(x)
        a.append(None)
        d["k"].append(1)
        b, e = f(x)
        return a, b, d, e
    x = torch.randn(2)
    return fn, drive


@case
def dict_with_tensor_values_and_int_keys():
    def fn(x):
        levels = {}
        for lvl in (3, 4, 5):
            levels[lvl] = F.avg_pool1d(x, 2 ** (lvl - 3))
        levels[2] = x
        return levels, sorted(levels), list(levels.values())[-1] is x
    x = torch.randn(1, 2, 16)
    return fn, lambda f, i: f(x)


class Features(OrderedDict):
    pass


@case
def ordered_dict_subclass_items():
    def fn(x):
        out = Features()
        out["p3"] = x
        out["p4"] = x[..., ::2]
        return out
    x = torch.randn(1, 2, 8)
    return fn, lambda f, i: f(x + i)


class LogitsProcessor:
    def __call__(self, input_ids, scores):
        raise NotImplementedError


class TemperatureLogitsWarper(LogitsProcessor):
    def __init__(self, t):
        self.temperature = t

    def __call__(self, input_ids, scores):
        return scores / self.temperature


class RepetitionPenaltyLogitsProcessor(LogitsProcessor):
    def __init__(self, penalty):
        self.penalty = penalty

    def __call__(self, input_ids, scores):
        score = torch.gather(scores, 1, input_ids)
        score = torch.where(score < 0, score * self.penalty, score / self.penalty)
        scores.scatter_(1, input_ids, score)
        return scores


class TopKLogitsWarper(LogitsProcessor):
    def __init__(self, top_k, filter_value=-float("Inf")):
        self.top_k = top_k
        self.filter_value = filter_value

    def __call__(self, input_ids, scores):
        top_k = min(self.top_k, scores.size(-1))
        indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
        return scores.masked_fill(indices_to_remove, self.filter_value)


class LogitsProcessorList(list):
    """transformers.generation.LogitsProcessorList: a list subclass that is called."""
    def __call__(self, input_ids, scores, **kwargs):
        import inspect
        for processor in self:
            function_args = inspect.signature(processor.__call__).parameters
            if len(function_args) > 2:
                scores = processor(input_ids, scores, **kwargs)
            else:
                scores = processor(input_ids, scores)
        return scores


@case
def hf_logits_processor_list_sampling_step():
    def step(input_ids, scores, cfg):
        procs = LogitsProcessorList()
        if cfg.get("rep"):
            procs.append(RepetitionPenaltyLogitsProcessor(cfg["rep"]))
        if cfg.get("temp"):
            procs.append(TemperatureLogitsWarper(cfg["temp"]))
        if cfg.get("topk"):
            procs.append(TopKLogitsWarper(cfg["topk"]))
        scores = procs(input_ids, scores)
        next_tokens = torch.multinomial(scores.softmax(-1), 1)
        return torch.cat([input_ids, next_tokens], -1), len(procs), type(procs).__name__
    cfgs = [{"rep": 1.2, "temp": 0.7, "topk": 3}, {"temp": 2.0}, {"topk": 2, "rep": 1.5}]

    def drive(f, i):
        return f(torch.tensor([[1, 2], [3, 3]]), torch.randn(2, 6), cfgs[i])
    return step, drive


@case
def returned_zip_and_reversed_iterators():
    def pairs(x):
        return zip(["a", "b"], x.unbind(0)), reversed([x, x * 2]), map(torch.neg, [x]), enumerate([x])

    def drive(f, i):
        z, r, m, e = f(torch.ones(2, 2) * i)
        return [type(v).__name__ for v in (z, r, m, e)], next(z), list(r), list(m), list(e)
    return pairs, drive


@case
def next_on_zip_and_reversed_made_in_frame():
    def fn(x):
        pairs = zip([x, x * 2], ["a", "b"])
        first = next(pairs)
        it = reversed([x, x + 1])
        en = enumerate([x * 3, x * 4])
        return first, [n for _, n in pairs], next(it) * 2, list(it), next(en), list(en)
    return fn, lambda f, i: f(torch.ones(1) * i)


XFAIL = {
}


@pytest.mark.parametrize("case", params(CASES, XFAIL))
def test_adversarial_containers(case):
    check_case(case)


class _SetattrOutput(OrderedDict):
    def __setattr__(self, name, value):
        if name in self.keys() and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)


def test_model_output_setattr_does_not_recompile_every_call():
    import warnings

    import dynamo
    from capture_harness import Recorder

    def fn(x):
        o = _SetattrOutput(a=x)
        o.a = x * 2
        o.b = x * 3
        return o
    dynamo.reset()
    cf = dynamo.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cf(torch.ones(1))
        with Recorder() as rec:
            for _ in range(3):
                cf(torch.ones(1))
    dynamo.reset()
    assert rec.compiled == [], [(r["function"], r["reason"]) for r in rec.compiled][:3]
