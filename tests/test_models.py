"""Every registered model has the expected parameter count; the CIFAR-form ones map 3x32x32 to 10
logits, ncf maps (user, item) ids to 2 logits, lstm-lm token windows to one logit per token."""

from __future__ import annotations

import pytest
import torch

from dynamix.models import REGISTRY, build_model, check_output, gradient_bytes, num_parameters

# Parameter counts at width 1 (BN VGG with a single linear head; CIFAR-stem ResNets).
EXPECTED_PARAMS = {
    "tiny-cnn": 94_762,
    "mlp": 1_841_162,
    "resnet8": 78_042,
    "resnet20": 272_474,
    "vgg11": 9_228_362,
    "vgg13": 9_413_066,
    "vgg16": 14_724_042,
    "vgg19": 20_035_018,
    "resnet18": 11_173_962,
    "resnet34": 21_282_122,
    "resnet50": 23_520_842,
    "ncf": 1_410_706,  # 2 x (2,000 + 20,000) x 32 embeddings + the MLP and head
    "lstm-lm": 3_203_584,  # 32,768 x 32 embedding + 32,768 x (64 + 1) softmax + the 25,088 of the LSTM
}
LOGITS = {"ncf": 2, "lstm-lm": 32_768}


def test_registry_is_exactly_the_documented_zoo():
    assert set(REGISTRY) == set(EXPECTED_PARAMS)


@pytest.mark.parametrize("name", sorted(EXPECTED_PARAMS))
def test_output_shape_and_parameter_count(name):
    model = build_model(name)
    assert check_output(model) == torch.Size([2, LOGITS.get(name, 10)])
    assert num_parameters(model) == EXPECTED_PARAMS[name]
    assert gradient_bytes(model) == 4 * EXPECTED_PARAMS[name]


@pytest.mark.parametrize("name", ["vgg11", "resnet18", "resnet20", "tiny-cnn"])
def test_width_multiplier_scales_parameters(name):
    half, full = num_parameters(build_model(name, 0.5)), num_parameters(build_model(name, 1.0))
    assert 0.2 * full < half < 0.35 * full  # conv weights scale ~ width^2
    assert check_output(build_model(name, 0.5)) == torch.Size([2, 10])


def test_unknown_model_names_the_choices():
    with pytest.raises(ValueError, match="model.name = 'alexnet' is unknown: must be one of tiny-cnn"):
        build_model("alexnet")


def test_same_seed_same_initial_weights():
    torch.manual_seed(3)
    a = build_model("resnet8")
    torch.manual_seed(3)
    b = build_model("resnet8")
    torch.manual_seed(4)
    c = build_model("resnet8")
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb)
    assert not torch.equal(pa, pc)


def test_ncf_tables_match_the_interaction_data_set_and_its_gradient_is_sparse():
    from dynamix.data import interactions
    from dynamix.models import ncf

    assert (ncf.USERS, ncf.ITEMS) == (interactions.USERS, interactions.ITEMS)
    data = interactions.generate(train=512, test=0)
    assert int(data.train_x[:, 0].max()) < ncf.USERS and int(data.train_x[:, 1].max()) < ncf.ITEMS
    torch.manual_seed(0)
    model = build_model("ncf")
    torch.nn.functional.cross_entropy(model(data.train_x[:64]), data.train_y[:64]).backward()
    g = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert 0 < float((g != 0).float().mean()) < 0.02  # 64 samples touch < 2 % of the parameters


def test_lstm_lm_vocabulary_matches_the_token_data_and_a_batch_touches_only_its_tokens_rows():
    """Sampled softmax in training: the embedding and softmax rows of tokens outside the batch get
    exactly zero gradient (~97 % of the parameters); evaluation scores the whole vocabulary."""
    from dynamix.data import tokens
    from dynamix.models import lstm

    assert lstm.VOCAB == tokens.VOCAB
    data = tokens.generate(train=512, test=0)
    torch.manual_seed(0)
    model = build_model("lstm-lm")
    x, y = data.train_x[:64], data.train_y[:64]
    torch.nn.functional.cross_entropy(model(x), y).backward()
    seen = torch.zeros(lstm.VOCAB, dtype=torch.bool)
    seen[x.unique()] = True
    for table in (model.embed.weight, model.out_weight):
        assert not table.grad[~seen].any()
    assert model.out_weight.grad[y].abs().sum(1).gt(0).all()  # every target's softmax row is trained
    g = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert 0 < float((g != 0).float().mean()) < 0.03  # 64 windows touch < 3 % of the parameters
    model.eval()
    with torch.no_grad():
        assert torch.isfinite(model(x)).all()
