// GraphScene and its items (see graph_scene.h).
#include "dynamo/gui/graph_scene.h"

#include <QGraphicsItem>
#include <QGraphicsSceneMouseEvent>
#include <QPainter>
#include <QStyleOptionGraphicsItem>

namespace dynamo::gui {
namespace {

/// Below this scale boxes lose their text and edges their curves.
constexpr double kDetailLod = 0.45;

QString htmlEscape(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }

QString nodeTooltip(const InspectGraph& g, const InspectNode& n) {
  QString t = "<b>" + htmlEscape(n.name) + "</b> " + htmlEscape(n.op) + "<br>" + htmlEscape(n.target);
  if (!n.tensor.empty()) t += "<br>" + htmlEscape(n.tensorDetail);
  if (!n.symbolicShape.empty()) {
    t += "<br>sizes " + htmlEscape(n.symbolicShape);
    for (const std::string& s : n.symbols) t += "<br>" + htmlEscape(s);
  }
  if (!n.kernels.empty()) {
    const InspectKernel& k = g.kernels()[static_cast<size_t>(n.kernels.front())];
    t += QString("<br>kernel <b>%1</b> (%2 nodes)").arg(htmlEscape(k.name)).arg(k.nodes.size());
    if (n.kernels.size() > 1) t += QString(", inlined into %1 more").arg(n.kernels.size() - 1);
  }
  if (!n.modulePath.empty()) t += "<br>module " + htmlEscape(n.modulePath);
  if (n.location.known())
    t += "<br>" + htmlEscape(n.location.str()) + ": <code>" + htmlEscape(n.location.sourceLine) + "</code>";
  for (const std::string& c : n.changes) t += "<br>changed " + htmlEscape(c);
  return t;
}

class UnitItem : public QGraphicsItem {
 public:
  UnitItem(GraphScene* scene, const VisibleUnit& unit, const LayoutBox& box, const QColor& fill,
           const std::string& overlayNote)
      : scene_(scene), unit_(unit), rect_(-box.w / 2, -box.h / 2, box.w, box.h), fill_(fill) {
    setPos(box.x, box.y);
    setZValue(2);
    setCursor(Qt::PointingHandCursor);
    setAcceptHoverEvents(true);  // the tooltip is written when the pointer first comes
    overlayNote_ = overlayNote;
  }
  /// Writes the tooltip (on the first hover, not for every box of a large view at once).
  void ensureToolTip() {
    if (!toolTip().isEmpty()) return;
    const InspectGraph& g = *scene_->graph();
    if (unit_.node >= 0) setToolTip(nodeTooltip(g, g.node(unit_.node)));
    else setOverlayNote(overlayNote_);
  }
  /// A collapsed group's tooltip, with what the overlay says of it.
  void setOverlayNote(const std::string& overlayNote) {
    overlayNote_ = overlayNote;
    if (unit_.group < 0) return;
    const InspectGroup& gr = scene_->graph()->group(unit_.group);
    setToolTip(QString("<b>%1</b><br>%2 nodes: click to expand%3")
                   .arg(htmlEscape(gr.label)).arg(gr.totalNodes)
                   .arg(overlayNote.empty() ? QString() : "<br>" + htmlEscape(overlayNote)));
  }
  void setFill(const QColor& fill) {
    fill_ = fill;
    update();
  }
  const QColor& fill() const { return fill_; }
  QRectF boundingRect() const override { return rect_.adjusted(-3, -3, 6, 6); }
  void setHighlighted(bool on) {
    if (on == highlighted_) return;
    highlighted_ = on;
    update();
  }
  void setCurrent(bool on) {
    if (on == current_) return;
    current_ = on;
    update();
  }
  const VisibleUnit& unit() const { return unit_; }

  void paint(QPainter* p, const QStyleOptionGraphicsItem* option, QWidget*) override {
    const double lod = option->levelOfDetailFromTransform(p->worldTransform());
    QColor border = current_ ? QColor("#1f4fd1") : highlighted_ ? QColor("#ff7f00") : QColor("#555555");
    if (lod < kDetailLod) {
      p->fillRect(rect_, highlighted_ || current_ ? border : fill_);
      return;
    }
    p->setRenderHint(QPainter::Antialiasing, lod > 1.5);
    if (unit_.group >= 0) {  // a collapsed group: a stack of boxes
      p->setPen(QPen(QColor("#777777"), 1));
      p->setBrush(fill_.darker(108));
      p->drawRoundedRect(rect_.translated(4, 4), 4, 4);
    }
    p->setPen(QPen(border, current_ || highlighted_ ? 3 : 1));
    p->setBrush(fill_);
    p->drawRoundedRect(rect_, 4, 4);
    QFont f = p->font();
    f.setPointSizeF(9);
    f.setBold(true);
    p->setFont(f);
    p->setPen(Qt::black);
    const QRectF top(rect_.left() + 3, rect_.top() + 2, rect_.width() - 6, rect_.height() / 2);
    p->drawText(top, Qt::AlignCenter, QString::fromStdString(unit_.title));
    f.setBold(false);
    f.setPointSizeF(8);
    p->setFont(f);
    p->setPen(QColor("#333333"));
    const QRectF bottom(rect_.left() + 3, rect_.center().y(), rect_.width() - 6, rect_.height() / 2 - 2);
    p->drawText(bottom, Qt::AlignCenter, QString::fromStdString(unit_.subtitle));
  }

 protected:
  void mousePressEvent(QGraphicsSceneMouseEvent* e) override {
    if (e->button() != Qt::LeftButton) return;
    emit scene_->unitClicked(unit_.node, unit_.group);
    e->accept();
  }
  void hoverEnterEvent(QGraphicsSceneHoverEvent*) override { ensureToolTip(); }

 private:
  GraphScene* scene_;
  VisibleUnit unit_;
  std::string overlayNote_;
  QRectF rect_;
  QColor fill_;
  bool highlighted_ = false;
  bool current_ = false;
};

class ClusterItem : public QGraphicsItem {
 public:
  ClusterItem(GraphScene* scene, const VisibleCluster& c, const LayoutBox& box, int depth)
      : scene_(scene), group_(c.group), label_(QString::fromStdString(c.label)),
        rect_(box.x, box.y, box.w, box.h), depth_(depth) {
    setZValue(0);
    setToolTip(QString("%1: click the title to collapse").arg(label_));
  }
  QRectF boundingRect() const override { return rect_.adjusted(-1, -1, 1, 1); }
  void paint(QPainter* p, const QStyleOptionGraphicsItem* option, QWidget*) override {
    const double lod = option->levelOfDetailFromTransform(p->worldTransform());
    const int shade = 250 - 8 * (depth_ % 5);
    p->setPen(QPen(QColor("#8888aa"), 1, Qt::DashLine));
    p->setBrush(QColor(shade, shade, 255));
    p->drawRect(rect_);
    if (lod < kDetailLod) return;
    QFont f = p->font();
    f.setPointSizeF(9);
    p->setFont(f);
    p->setPen(QColor("#333366"));
    p->drawText(titleRect(), Qt::AlignHCenter | Qt::AlignTop, QString::fromUtf8("\u25BE ") + label_);
  }

 protected:
  void mousePressEvent(QGraphicsSceneMouseEvent* e) override {
    if (e->button() == Qt::LeftButton && titleRect().contains(e->pos())) {
      emit scene_->clusterClicked(group_);
      e->accept();
      return;
    }
    e->ignore();
  }

 private:
  QRectF titleRect() const { return QRectF(rect_.left(), rect_.top(), rect_.width(), 18); }
  GraphScene* scene_;
  int group_;
  QString label_;
  QRectF rect_;
  int depth_;
};

class EdgeItem : public QGraphicsItem {
 public:
  EdgeItem(const std::vector<double>& pts, const LayoutBox* tip, const QString& tooltip) {
    setZValue(1);
    setAcceptHoverEvents(true);
    setToolTip(tooltip);
    if (pts.size() >= 2) {
      path_.moveTo(pts[0], pts[1]);
      for (size_t i = 2; i + 5 < pts.size(); i += 6)
        path_.cubicTo(pts[i], pts[i + 1], pts[i + 2], pts[i + 3], pts[i + 4], pts[i + 5]);
      first_ = QPointF(pts[0], pts[1]);
      last_ = QPointF(pts[pts.size() - 2], pts[pts.size() - 1]);
    }
    if (tip) {
      const QPointF t(tip->x, tip->y);
      QLineF dir(last_, t);
      if (dir.length() > 0.01) {
        QLineF n = dir.normalVector().unitVector();
        const QPointF off = (n.p2() - n.p1()) * 3.5;
        arrow_ << t << last_ + off << last_ - off;
      }
      last_ = t;
    }
    bounds_ = path_.boundingRect().united(arrow_.boundingRect()).adjusted(-4, -4, 4, 4);
  }
  QRectF boundingRect() const override { return bounds_; }
  /// The stroke the pointer hits, made on the first hit test (not for every edge at once).
  QPainterPath shape() const override {
    if (shape_.isEmpty()) {
      QPainterPathStroker stroker;
      stroker.setWidth(6);
      shape_ = stroker.createStroke(path_);
    }
    return shape_;
  }
  void paint(QPainter* p, const QStyleOptionGraphicsItem* option, QWidget*) override {
    const double lod = option->levelOfDetailFromTransform(p->worldTransform());
    const QColor c = hover_ ? QColor("#d62728") : QColor("#666666");
    p->setPen(QPen(c, hover_ ? 2.5 : 1));
    if (lod < kDetailLod) {
      p->drawLine(first_, last_);
      return;
    }
    p->setRenderHint(QPainter::Antialiasing, true);
    p->setBrush(Qt::NoBrush);
    p->drawPath(path_);
    if (!arrow_.isEmpty()) {
      p->setBrush(c);
      p->drawPolygon(arrow_);
    }
  }

 protected:
  void hoverEnterEvent(QGraphicsSceneHoverEvent*) override {
    hover_ = true;
    update();
  }
  void hoverLeaveEvent(QGraphicsSceneHoverEvent*) override {
    hover_ = false;
    update();
  }

 private:
  QPainterPath path_;
  mutable QPainterPath shape_;
  QPolygonF arrow_;
  QPointF first_, last_;
  QRectF bounds_;
  bool hover_ = false;
};

QString edgeTooltip(const InspectGraph& g, const VisibleEdge& e) {
  const InspectNode& src = g.node(e.srcNode);
  const InspectNode& dst = g.node(e.dstNode);
  QString t = QString::fromStdString(src.name + " -> " + dst.name);
  t += src.tensor.empty() ? QString("\n(not a tensor)")
                          : "\n" + QString::fromStdString(src.tensorDetail);
  if (!src.symbolicShape.empty()) t += "\nsizes " + QString::fromStdString(src.symbolicShape);
  if (e.count > 1) t += QString("\n%1 edges between these boxes").arg(e.count);
  return t;
}

}  // namespace

QColor categoryColour(OpCategory c) {
  const std::string_view s = opCategoryColour(c);
  return QColor(QString::fromUtf8(s.data(), static_cast<int>(s.size())));
}

QColor diffColour(DiffStatus d) {
  const std::string_view s = diffStatusColour(d);
  return QColor(QString::fromUtf8(s.data(), static_cast<int>(s.size())));
}

GraphScene::GraphScene(QObject* parent) : QGraphicsScene(parent) {
  setItemIndexMethod(QGraphicsScene::BspTreeIndex);
}

void GraphScene::clearContent() {
  clear();
  unitItems_.clear();
  graph_.reset();
  visible_.reset();
  layout_.reset();
}

void GraphScene::setContent(InspectGraphPtr graph, std::shared_ptr<const VisibleGraph> visible,
                            std::shared_ptr<const LayoutResult> layout, Overlay overlay) {
  clearContent();
  graph_ = std::move(graph);
  visible_ = std::move(visible);
  layout_ = std::move(layout);
  overlay_ = overlay;
  const OverlayPainter painter(overlay_, *graph_);
  std::vector<int> depth(visible_->clusters.size(), 0);
  for (size_t i = 0; i < visible_->clusters.size(); ++i) {
    const VisibleCluster& c = visible_->clusters[i];
    depth[i] = c.parent < 0 ? 0 : depth[static_cast<size_t>(c.parent)] + 1;
    auto it = layout_->clusters.find(c.key);
    if (it != layout_->clusters.end()) {
      auto* item = new ClusterItem(this, c, it->second, depth[i]);
      item->setZValue(-10 + depth[i] * 0.01);
      addItem(item);
    }
  }
  unitItems_.assign(visible_->units.size(), nullptr);
  for (size_t i = 0; i < visible_->units.size(); ++i) {
    auto it = layout_->nodes.find(visible_->units[i].key);
    if (it == layout_->nodes.end()) continue;
    const VisibleUnit& u = visible_->units[i];
    auto* item = new UnitItem(this, u, it->second, QColor(QString::fromStdString(painter.fill(u))),
                              u.group >= 0 ? painter.describeGroup(u.group) : std::string());
    addItem(item);
    unitItems_[i] = item;
  }
  for (const VisibleEdge& e : visible_->edges) {
    auto it = layout_->edges.find(e.key);
    if (it == layout_->edges.end()) continue;
    auto tip = layout_->tips.find(e.key);
    addItem(new EdgeItem(it->second, tip == layout_->tips.end() ? nullptr : &tip->second,
                         edgeTooltip(*graph_, e)));
  }
  setSceneRect(QRectF(-20, -20, layout_->width + 40, layout_->height + 40));
}

void GraphScene::setOverlay(Overlay overlay) {
  overlay_ = overlay;
  if (!graph_ || !visible_) return;
  const OverlayPainter painter(overlay_, *graph_);
  for (size_t i = 0; i < unitItems_.size(); ++i) {
    if (!unitItems_[i]) continue;
    auto* item = static_cast<UnitItem*>(unitItems_[i]);
    const VisibleUnit& u = visible_->units[i];
    item->setFill(QColor(QString::fromStdString(painter.fill(u))));
    if (u.group >= 0) item->setOverlayNote(painter.describeGroup(u.group));
  }
}

QString GraphScene::unitFill(const std::string& key) const {
  if (!visible_) return {};
  for (size_t i = 0; i < unitItems_.size(); ++i)
    if (unitItems_[i] && visible_->units[i].key == key)
      return static_cast<UnitItem*>(unitItems_[i])->fill().name();
  return {};
}

QString GraphScene::unitToolTip(const std::string& key) const {
  if (!visible_) return {};
  for (size_t i = 0; i < unitItems_.size(); ++i)
    if (unitItems_[i] && visible_->units[i].key == key) {
      auto* item = static_cast<UnitItem*>(unitItems_[i]);
      item->ensureToolTip();
      return item->toolTip();
    }
  return {};
}

void GraphScene::setHighlighted(const QSet<int>& nodes) {
  if (!visible_) return;
  std::vector<bool> on(unitItems_.size(), false);
  for (int n : nodes)
    if (n >= 0 && static_cast<size_t>(n) < visible_->unitOfNode.size()) {
      const int u = visible_->unitOf(n);
      if (u >= 0) on[static_cast<size_t>(u)] = true;
    }
  for (size_t i = 0; i < unitItems_.size(); ++i)
    if (unitItems_[i]) static_cast<UnitItem*>(unitItems_[i])->setHighlighted(on[i]);
}

QRectF GraphScene::selectNode(int node) {
  QRectF r;
  const int target = visible_ && node >= 0 ? visible_->unitOf(node) : -1;
  for (size_t i = 0; i < unitItems_.size(); ++i) {
    if (!unitItems_[i]) continue;
    const bool cur = static_cast<int>(i) == target;
    static_cast<UnitItem*>(unitItems_[i])->setCurrent(cur);
    if (cur) r = unitItems_[i]->sceneBoundingRect();
  }
  return r;
}

QRectF GraphScene::unitRect(const std::string& key) const {
  if (!visible_) return {};
  for (size_t i = 0; i < unitItems_.size(); ++i)
    if (unitItems_[i] && visible_->units[i].key == key) return unitItems_[i]->sceneBoundingRect();
  return {};
}

}  // namespace dynamo::gui
