"""torchvision detection: Faster R-CNN (MobileNetV3-Large FPN backbone, random init) in eval mode on a
batch of images (torchvision's own CUDA operators: RoIAlign, batched NMS; anchor generation, box
decoding, interpolation), and a Mask R-CNN training step's forward losses (RoIAlign for masks)."""
from common import deterministic_torch, digest, digest_all, finish

torch = deterministic_torch(0)
torch.use_deterministic_algorithms(True, warn_only=True)
import torchvision  # noqa: E402
from torchvision.models import detection  # noqa: E402

dev = "cuda"
g = torch.Generator(device=dev).manual_seed(2)
torch.manual_seed(0)
det = detection.fasterrcnn_mobilenet_v3_large_fpn(weights=None, weights_backbone=None, num_classes=11,
                                                  box_score_thresh=0.0).to(dev).eval()
images = [torch.rand(3, 320, 416, device=dev, generator=g) for _ in range(4)]
with torch.no_grad():
    preds = det(images)
out = {
    "boxes": digest_all([p["boxes"] for p in preds]),
    "scores": digest_all([p["scores"] for p in preds]),
    "labels": digest_all([p["labels"] for p in preds]),
}
counts = [int(p["boxes"].shape[0]) for p in preds]

# NMS and RoIAlign directly, on fixed boxes.
boxes = torch.rand(2000, 4, device=dev, generator=g) * 200
boxes[:, 2:] += boxes[:, :2] + 1
scores = torch.rand(2000, device=dev, generator=g)
idx = torch.randint(0, 5, (2000,), device=dev, generator=g)
out["batched_nms"] = digest(torchvision.ops.batched_nms(boxes, scores, idx, 0.5))
feat = torch.randn(2, 64, 50, 50, device=dev, generator=g)
rois = torch.cat([torch.randint(0, 2, (300, 1), device=dev, generator=g).float(), boxes[:300] / 4], dim=1)
out["roi_align"] = digest(torchvision.ops.roi_align(feat, rois, (7, 7), spatial_scale=1.0, sampling_ratio=2,
                                                    aligned=True))

# Mask R-CNN losses in train mode (forward only: RoIAlign's backward accumulates with atomics).
torch.manual_seed(0)
mask = detection.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=5).to(dev).train()
targets = []
for i in range(2):
    b = torch.tensor([[20.0, 30.0, 120.0, 160.0], [150.0, 40.0, 300.0, 200.0]], device=dev) + i * 5
    m = torch.zeros(2, 320, 416, dtype=torch.uint8, device=dev)
    m[0, 30:160, 20:120] = 1
    m[1, 40:200, 150:300] = 1
    targets.append({"boxes": b, "labels": torch.tensor([1, 3], device=dev), "masks": m})
with torch.no_grad():
    losses = mask(images[:2], targets)
out["maskrcnn_losses"] = digest(torch.stack([losses[k].float() for k in sorted(losses)]))
torch.cuda.synchronize()
finish(out, detections=counts, torchvision=torchvision.__version__)
