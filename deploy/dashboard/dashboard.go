// Package dashboard is Ferry's Grafana dashboard, written with Grafana's
// foundation SDK; make generate writes it to deploy/grafana-dashboard.json,
// which a test keeps equal to it.
package dashboard

import (
	"encoding/json"

	"github.com/grafana/grafana-foundation-sdk/go/bargauge"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// UID is the dashboard's stable identity in Grafana.
const UID = "ferry-migrations"

func datasource() common.DataSourceRef {
	typ, uid := "prometheus", "${datasource}"
	return common.DataSourceRef{Type: &typ, Uid: &uid}
}

type panelBuilder[B any] interface {
	cog.Builder[dashboard.Panel]
	Title(string) B
	Description(string) B
	Datasource(common.DataSourceRef) B
	GridPos(dashboard.GridPos) B
	Id(uint32) B
	Unit(string) B
	WithTarget(cog.Builder[variants.Dataquery]) B
}

func configure[B panelBuilder[B]](b B, id uint32, p Panel, pos dashboard.GridPos) cog.Builder[dashboard.Panel] {
	b.Id(id).Title(p.Title).Description(p.Description).Datasource(datasource()).GridPos(pos)
	if p.Unit != "" {
		b.Unit(p.Unit)
	}
	for i, q := range p.Queries {
		t := prometheus.NewDataqueryBuilder().Expr(q.Expr).RefId(string(rune('A' + i))).Datasource(datasource())
		if q.Legend != "" {
			t.LegendFormat(q.Legend)
		}
		if p.Instant {
			t.Instant().Format(prometheus.PromQueryFormatTable)
		}
		b.WithTarget(t)
	}
	return b
}

func panel(id uint32, p Panel, pos dashboard.GridPos) cog.Builder[dashboard.Panel] {
	switch p.Kind {
	case "stat":
		return configure(stat.NewPanelBuilder(), id, p, pos)
	case "table":
		return configure(table.NewPanelBuilder(), id, p, pos)
	case "bargauge":
		return configure(bargauge.NewPanelBuilder(), id, p, pos)
	default:
		return configure(timeseries.NewPanelBuilder().Min(0), id, p, pos)
	}
}

// Build returns the dashboard.
func Build() (dashboard.Dashboard, error) {
	node := dashboard.NewQueryVariableBuilder("node").
		Label("node").
		Datasource(datasource()).
		Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(ferry_libvirt_up, node)")}).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".*")
	b := dashboard.NewDashboardBuilder("Ferry: live migrations").
		Uid(UID).
		Description("Ferry's view of KVM live migrations on each node: jobs in flight, how they converge, how they end, the migration proxy and the node's libvirt.").
		Tags([]string{"ferry", "kubevirt", "libvirt", "live-migration"}).
		Refresh("10s").
		Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Prometheus").Type("prometheus")).
		WithVariable(node)
	var y, id uint32
	for _, r := range Rows {
		id++
		b.WithRow(dashboard.NewRowBuilder(r.Title).Id(id).GridPos(dashboard.GridPos{H: 1, W: 24, X: 0, Y: y}))
		y++
		var x uint32
		for _, p := range r.Panels {
			w := uint32(12)
			if p.Kind == "table" {
				w = 24
			}
			if x+w > 24 {
				x, y = 0, y+8
			}
			id++
			b.WithPanel(panel(id, p, dashboard.GridPos{H: 8, W: w, X: x, Y: y}))
			x += w
		}
		y += 8
	}
	return b.Build()
}

// JSON is the dashboard as Grafana imports it.
func JSON() ([]byte, error) {
	d, err := Build()
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
